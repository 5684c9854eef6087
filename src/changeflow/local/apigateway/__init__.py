"""The template's REST API on the embedded stack, answered as API Gateway answers it (like
``samcli.local.apigw``): ``rest_api`` routes, validates and proxies to the handlers; ``gateway_responses``
is API Gateway's own answers and quotas; ``velocity`` its mapping templates."""
