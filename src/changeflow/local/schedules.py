"""The template's EventBridge Scheduler schedules on the embedded stack (issue 35: the digest's): SAM ``ScheduleV2``
events of functions and state machines, and ``AWS::Scheduler::Schedule`` resources, created in moto's
scheduler, which ``moto_patches.scheduler.runs`` runs on the stack's time scale."""

from __future__ import annotations

from .template import Template


def scheduled_functions(template: Template) -> set[str]:
    """The functions a schedule runs (their own ``ScheduleV2`` events): they run between changes, on the stack's
    time scale, and no change invokes them."""
    return {logical_id for logical_id, spec in template.of_type("AWS::Serverless::Function").items()
            if any(e.get("Type") == "ScheduleV2" for e in spec.get("Properties", {}).get("Events", {}).values())}


def create(template: Template, scheduler) -> None:
    found = []
    for kind in ("AWS::Serverless::Function", "AWS::Serverless::StateMachine"):
        for logical_id, spec in template.of_type(kind).items():
            for event_id, event in spec.get("Properties", {}).get("Events", {}).items():
                if event["Type"] != "ScheduleV2":
                    continue
                props = template.resolve(event["Properties"])
                target = {"Arn": template.arn(logical_id),  # its RoleArn, else the role SAM makes for it (access.py)
                          "RoleArn": props.get("RoleArn") or template.arn(f"{logical_id}{event_id}Role")}
                target.update({key: props[key] for key in ("Input", "RetryPolicy", "DeadLetterConfig") if key in props})
                found.append((props.get("Name") or f"{template.stack_name}-{logical_id}{event_id}", props, target))
    for logical_id, spec in template.of_type("AWS::Scheduler::Schedule").items():
        props = template.resolve(spec["Properties"])
        found.append((props.get("Name") or template.physical_name(logical_id), props, props["Target"]))
    for name, props, target in found:
        optional = {key: props[key] for key in ("State", "StartDate", "EndDate", "ScheduleExpressionTimezone",
                                                "GroupName", "Description") if key in props}
        scheduler.create_schedule(Name=name[:64], ScheduleExpression=props["ScheduleExpression"], Target=target,
                                  FlexibleTimeWindow=props.get("FlexibleTimeWindow", {"Mode": "OFF"}), **optional)
