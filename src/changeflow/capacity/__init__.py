"""Where changeflow stops on AWS (issue 25): the capacity model and the simulation.

- ``quotas``: the AWS quotas that bound a deployment, each with the page it was read from and the day, and
  the stack's own: its REST API stage's throttle, read from the template.
- ``workflow``: what the model needs from ``statemachines/change.asl.json``, read from it (step order,
  transitions and Lambda invocations per applied change and per conflict, the back-off and the retries).
- ``model``: token buckets in closed form and the walls: the first quota each workflow type meets at
  10², 10³ and 10⁴ changes/s, and what one hot entity can take.
- ``simulation``: a discrete-event simulation (SimPy) of the workflow on a platform (the embedded stack
  or AWS): token buckets, Lambda concurrency and cold starts, DynamoDB latency, partition throughput and
  conditional-write conflicts, with ``changeflow_core``'s decision rules.
- ``calibration``: the embedded stack's latencies measured, the two scheduling figures fitted on one
  contention run and judged on another, held out.
- ``predictions``: AWS at one hot key and at 10⁴ changes/s, started directly and through POST /changes (the
  stack's stage throttle), with their cost from the cost model.
- ``tables``: the Markdown blocks of ``docs/capacity.md`` (``make capacity``).
"""
