"""Patches of moto's DynamoDB (``moto.dynamodb``): AWS's limits where moto is more lenient (``limits``),
numbers as DynamoDB stores, returns and reads them (``numbers``), one type per attribute value
(``attribute_values``), and Query and Scan at a cost linear in what they return (``perf``)."""
