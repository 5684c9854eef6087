"""Patches of moto's DynamoDB (``moto.dynamodb``): AWS's limits where moto is more lenient (``limits``),
and Query and Scan at a cost linear in what they return (``perf``)."""
