"""Patches of moto's DynamoDB Streams (``moto.dynamodbstreams`` and the stream shard in ``moto.dynamodb``): a
record lives 24 hours, then it is trimmed (``retention``)."""
