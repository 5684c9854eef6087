"""What a change costs on AWS (issue 38): the cost model, part of the toolkit (``make cost`` runs it through
``benchmarks/cost.py``; ``make capacity`` prices its predictions with it).

- ``prices``: the list prices and what each service counts, with the day they were read.
- ``units``: DynamoDB's read and write units from the items a request carried, the transitions Standard
  bills, the Lambda invocations and the Wait seconds of an execution history.
- ``bill``: dollars per million changes from those figures.
- ``paths``: each path of the workflow measured on the embedded stack; what the principal adds.
- ``seal``: what the seal adds per change (issue 33): requests, bytes, the HMACs' time, the event path.
- ``contention``: K writers to one entity at real back-off timing.
- ``startup``: cold starts, INIT billing and the deployment packages.
- ``report``: ``make cost``'s command line, its printed report and its JSON.
- ``pages``: the docs' measured tables rendered from ``make cost``'s and ``make bench``'s JSON
  (``benchmarks/readme_tables.py``).
"""
