"""changeflow_core: the domain of changeflow, shared by every step Lambda (shipped as a layer).

Modules:
- ``model``: attribute names, key design and the reserved names of the item model.
- ``errors``: the named errors the state machine catches by name.
- ``validation``: turns a raw change request into a normalised ``Change``.
- ``codec``: plain JSON <-> DynamoDB attribute values, and DynamoDB item sizes.
- ``items``: builds the ``v0`` and history items, and renders them as plain views.
- ``decisions``: stale / duplicate / conflict classification.
- ``store``: the DynamoDB calls (consistent reads, conditional writes, TTL tags).
"""
