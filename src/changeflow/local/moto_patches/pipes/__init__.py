"""Patches of moto's EventBridge Pipes (``moto.pipes``): a pipe with a DynamoDB stream source runs, reading,
filtering, batching, enriching, delivering and retrying as Pipes does (``runner``)."""
