"""Patches of moto's EventBridge (``moto.events``): rules deliver to Step Functions (``targets``)."""
