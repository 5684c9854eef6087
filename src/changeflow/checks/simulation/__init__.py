"""The deterministic simulation of the whole system (issue 32), in the spirit of FoundationDB's simulation
testing and TigerBeetle's VOPR, its histories checked the way Jepsen's Elle checks them: from a seed, a
plan of operations on the real stack (the template, the ASL and the handlers on the embedded stack, behind
``changeflow serve``'s HTTP for the signed paths), run with the executions' interleaving chosen by the seed,
then every promise checked from what each caller was told and what the public surfaces show.

The parts, each a module:

- ``plan``: the seed's stack configuration and operations (workloads composed: K writers, faults and
  storms, redactions, imports of odd input with kills and resumes, adoption, an insider, credentials);
- ``scheduler``: which execution goes on next, at every step boundary, chosen by the seed;
- ``world``: ``serve`` in this process, the scheduler and the fault injector (``checks.faults``) on it, the
  command line (the ``changeflow`` entry point), signed HTTP, what the run recorded;
- the operations: ``writes`` (batches of changes, redrives), ``chainops`` (pre-chain versions, adopt,
  redact, digest, export, proof, TTL), ``importing``, ``identity``, ``insider`` (the tactics);
- the checkers, one per promise (``findings.PROMISES``): ``check_writes`` (outcomes told are true; no
  version lost, doubled or reverted), ``check_audit``, ``check_redaction``, ``importing`` (its
  promise), ``identity`` (principals);
- ``findings`` (a violation, its code and the seam of issue 32 it is), ``runner``, ``shrink`` (delta
  debugging), ``__main__`` (``make simulate``, ``make simulate-long``).

**What is deterministic.** A seed fixes the plan: the configuration, every operation and its parameters
(requests, change ids, effective times given by clients, faults and where they strike, the insider's
tactic and target, the import's lines, options, kills and resumes, the credentials). It fixes the
schedule of every execution the simulation starts itself (a batch of changes, a command's, a signed POST):
the scheduler chooses only when every execution is stopped at a boundary, among them sorted by name, with
the operation's own random stream, so a seed's run prints the same schedule fingerprint every time
(``Outcome.fingerprint``, the digest of the choices) and the same violations. Faults are keyed by change
and step, so they strike the same invocations. Server-given times are the start's millisecond: starts are
spaced 3 ms apart, so their order (all the ratchet looks at) is the seed's.

**What is not.** Wall-clock values: ``recordedAt``, server-given ``effectiveAt`` values, start dates, and the
chain hashes that cover them; none decides an outcome but through its order. An import's threads are the
importer's, not the scheduler's: one record at a time, the oldest execution goes first and the importer
starts the next only once it has seen the last applied, so the schedule holds; all at once, a choice waits
until no execution was created for 0.3 s, which holds for a burst of starts; but starts that follow as
records settle (an importer that orders each entity's records) come when the importer's polling (every
50 ms to 1 s) sees the last applied, and what it had started when a Ctrl-C lands is its polling's too. A
seed whose schedule differed prints another fingerprint: compare them.
"""
