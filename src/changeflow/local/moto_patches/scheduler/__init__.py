"""Patches of moto's EventBridge Scheduler (``moto.scheduler``): schedules invoke their targets (``runs``)."""
