"""StartExecution's ``name`` and ``input`` as AWS checks them: a nameless execution gets a UUID (stock moto
names it ``None``), a name breaks none of AWS's rules, and an input over 256 KiB is refused before anything
starts. https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html"""

from __future__ import annotations

from ..originals import ORIGINALS

MAX_PAYLOAD_BYTES = 256 * 1024  # Step Functions: input or output of a task, state or execution


def patch_execution_names() -> None:
    import uuid

    from moto.stepfunctions.parser import models

    backend = models.StepFunctionsParserBackend
    original = ORIGINALS.setdefault("start_execution", backend.start_execution)

    def start_execution(self, state_machine_arn, name=None, *args, **kwargs):
        return original(self, state_machine_arn, name or str(uuid.uuid4()), *args, **kwargs)

    backend.start_execution = start_execution


def patch_execution_name_rules() -> None:
    """StartExecution ``name``: 1-80 characters, none of white space, brackets ``< > { } [ ]``, wildcards
    ``? *``, the specials ``" # % \\ ^ | ~ ` $ & , ; : /``, control characters (U+0000-001F, U+007F-009F),
    U+FFFE-FFFF or surrogates. https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html
    moto's own backend has this check (``_validate_name``) but its Step Functions interpreter never calls it."""
    from moto.stepfunctions.exceptions import InvalidName, ValidationException
    from moto.stepfunctions.parser import models

    backend = models.StepFunctionsParserBackend
    original = ORIGINALS.setdefault("start_execution_names", backend.start_execution)

    def start_execution(self, state_machine_arn, name=None, *args, **kwargs):
        if name is not None:
            if len(name) == 0:
                raise ValidationException("1 validation error detected: Value '' at 'name' failed to satisfy "
                                          "constraint: Member must have length greater than or equal to 1")
            self._validate_name(name)  # the listed characters and the 80-character limit
            if any(c.isspace() or 0xFFFE <= ord(c) <= 0xFFFF or 0xD800 <= ord(c) <= 0xDFFF for c in name):
                raise InvalidName("Invalid Name: '" + name + "'")
        return original(self, state_machine_arn, name, *args, **kwargs)

    backend.start_execution = start_execution


def patch_execution_input_limit() -> None:
    """StartExecution ``input``: at most 256 KiB as UTF-8 ("Length constraints apply to the payload size,
    and are expressed as bytes in UTF-8 encoding"); AWS refuses a larger one at the API, so no execution
    starts. Stock moto starts it and fails it at its first state.
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html
    https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html (256 KiB per task, state, execution)"""
    from moto.stepfunctions.exceptions import ValidationException
    from moto.stepfunctions.parser import models

    backend = models.StepFunctionsParserBackend
    original = ORIGINALS.setdefault("start_execution_input", backend.start_execution)

    def start_execution(self, state_machine_arn, name=None, execution_input=None, *args, **kwargs):
        if execution_input is not None and len(execution_input.encode("utf-8")) > MAX_PAYLOAD_BYTES:
            raise ValidationException(
                "1 validation error detected: Value at 'input' failed to satisfy constraint: "
                f"Member must have length less than or equal to {MAX_PAYLOAD_BYTES}")
        return original(self, state_machine_arn, name, execution_input, *args, **kwargs)

    backend.start_execution = start_execution
