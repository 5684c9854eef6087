"""Patches of moto's Step Functions interpreter (``moto.stepfunctions.parser``). Each keeps what the
interpreter does (the same states, transitions, retries and history events) and changes how the world
around it behaves, or makes it do what AWS's documentation says where moto is more lenient: one AWS
behaviour group per module, each citing its page."""
