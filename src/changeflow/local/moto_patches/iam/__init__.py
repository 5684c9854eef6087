"""IAM evaluated on the embedded stack (issue 33 item 2): ``evaluation`` (AWS's policy evaluation logic),
``requests`` (what each request asks for), ``enforcement`` (the patch, and what the stack tells it)."""
