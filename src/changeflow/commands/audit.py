"""``changeflow verify``, ``digest``, ``proof``, ``verify-proof`` and ``repair``: the audit (changeflow.audit)
from the command line, against ``changeflow serve`` or a stack deployed on AWS; ``verify-proof`` against
nothing but its two files."""

from __future__ import annotations

import sys
from pathlib import Path

from changeflow_core import chain, wire

from .. import report
from ..client import Changeflow, targets
from ..common.errors import OK, REJECTED, NotFound, UsageError
from .options import COUNT, EXIT_2, EXIT_3_REMOTE, add_remote_options, exit_help
from .output import dump, no_such_entity


def _versions_span(r) -> str:
    if not r.versions:
        return "no versions"
    text = f"versions {report.ranges(r.versions)}"
    return text + (f"; missing {report.ranges(r.missing)}" if r.missing else "")


def cmd_verify(args) -> int:
    from ..audit import executions, principals, verify

    client = targets.client_for(args)
    if args.digests:
        return _verify_digests(client, args)
    if args.since_digest:
        return _verify_since_digest(client, args)
    ids = verify.entities(client) if args.all else [args.entity]
    reports = [verify.verify(client, entity_id) for entity_id in ids]
    if not args.all and not reports[0].found:
        raise no_such_entity(args.entity)
    if args.executions:
        for r in reports:
            r.problems.extend(executions.check_executions(client, r.entity_id))
    if args.principals:
        journals = principals.Journals(client)  # each log read once for every entity
        for r in reports:
            problems, notes = principals.check_principals(client, r.entity_id, journals)
            r.problems.extend(problems)
            r.notes.extend(notes)
    if args.json:
        dump([{"entityId": r.entity_id, "ok": r.ok, "versions": r.versions, "missing": r.missing,
               "problems": r.problems, "notes": r.notes} for r in reports])
    else:
        for r in reports:
            print(f"{r.entity_id}: {'ok' if r.ok else 'PROBLEMS'} ({_versions_span(r)})")
            for problem in r.problems:
                print(f"  - {problem}")
            for note in r.notes:
                print(f"  · {note}")
    return OK if all(r.ok for r in reports) else REJECTED


def _chain_at(client: Changeflow, url: str):
    """The chain of digests at an s3:// address (to the digest it names), or a one-line error."""
    from ..audit import committed, digestchain

    try:
        chain = committed.load_location(client, url)
    except digestchain.NotALocation as exc:
        raise UsageError(str(exc)) from exc
    if not chain.digests and not chain.findings:
        raise NotFound(f"no digest at {url}")
    return chain


def _verify_digests(client: Changeflow, args) -> int:
    """The whole chain of digests in the bucket, and the table against every head it committed."""
    from ..audit import committed

    chain = _chain_at(client, args.digests)
    problems = committed.audit(client, chain)
    ok = chain.ok and not problems
    if args.json:
        dump({**committed.summary(chain), "ok": ok, "findings": [str(f) for f in chain.findings],
              "problems": problems})
        return OK if ok else REJECTED
    span = (f"#{chain.digests[0].sequence} ({chain.digests[0].document['takenAt']}) to #{chain.digests[-1].sequence} "
            f"({chain.digests[-1].document['takenAt']})" if chain.digests else "none readable")
    print(f"digests {chain.location}: {len(chain.digests)} in the chain, {span}; {len(chain.tree)} entities: "
          f"{'the chain holds and the table matches every head it committed' if ok else 'PROBLEMS'}")
    for finding in chain.findings:
        print(f"  - {finding}")
    for entity_id, found in problems.items():
        for problem in found:
            print(f"  {entity_id}: {problem}")
    return OK if ok else REJECTED


def _since_digest_document(client: Changeflow, source: str) -> tuple[dict, list[str]]:
    """The digest ``--since-digest`` names, as a document listing every head, and what its source holds
    wrong before anything is proven (a chain in the bucket that does not hold)."""
    from ..audit import committed

    if source.startswith("s3://"):
        chain = _chain_at(client, source)
        if not chain.digests:
            raise NotFound(f"no digest of this stack at {source}: {chain.findings[0]}")
        return committed.as_heads_digest(chain), [str(f) for f in chain.findings]
    try:
        return wire.loads(Path(source).read_text(encoding="utf-8")), []
    except OSError as exc:
        raise UsageError(f"{source}: cannot read it ({exc.strerror or exc})") from exc
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested past the parser's depth
        raise UsageError(f"{source}: not a JSON digest ({str(exc).splitlines()[0][:200]})") from exc


def _verify_since_digest(client: Changeflow, args) -> int:
    """Prove that nothing recorded before a digest has changed since (every entity the digest names)."""
    from ..audit import digests

    taken, chain_findings = _since_digest_document(client, args.since_digest)
    try:
        digests.check_digest(taken)  # a digest is input from outside: every field checked before use
    except digests.NotADigest as exc:
        raise UsageError(f"{args.since_digest}: {exc}") from exc
    wanted = None if args.all or not args.entity else {args.entity}
    if wanted is not None:
        if args.entity not in {h["entityId"] for h in taken["entities"]}:  # nothing to prove is not a proof
            raise NotFound(f"{args.entity!r} is not in the digest {args.since_digest} "
                           f"({len(taken['entities'])} entities): it proves nothing about it")
        altered = chain.merkle_root(taken["entities"]) != taken["root"]  # the whole file's root, first
        taken = {**taken, "entities": [h for h in taken["entities"] if h["entityId"] in wanted]}
        taken["root"] = chain.merkle_root(taken["entities"])  # the proof is of these entities' heads
        problems = digests.verify_since(client, taken)
        if altered:
            problems = {"(digest)": ["the digest's root does not match its entities: the file was altered"],
                        **problems}
    else:
        problems = digests.verify_since(client, taken)
    if chain_findings:
        problems = {"(digest)": chain_findings + problems.get("(digest)", []),
                    **{k: v for k, v in problems.items() if k != "(digest)"}}
    if args.json:
        dump({"digest": args.since_digest, "takenAt": taken.get("takenAt"), "entities": len(taken["entities"]),
              "ok": not problems, "problems": problems})
    else:
        print(f"since the digest of {taken.get('takenAt')}: {len(taken['entities'])} entities, "
              f"{'nothing recorded before it has changed' if not problems else 'CHANGED'}")
        for entity_id, found in problems.items():
            for problem in found:
                print(f"  {entity_id}: {problem}")
    return OK if not problems else REJECTED


def cmd_digest(args) -> int:
    from ..audit import digests, verify

    client = targets.client_for(args)
    ids = verify.entities(client) if args.all else [args.entity]
    taken = digests.digest(client, ids)
    if not args.all and not taken["entities"]:
        raise no_such_entity(args.entity)
    text = wire.dumps(taken)
    if args.output and args.output != "-":
        Path(args.output).write_text(text + "\n", encoding="utf-8")
        print(f"digest of {len(taken['entities'])} entities, root {taken['root']}, written to {args.output}")
    else:
        print(text)
    return OK


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from exc


def _digest_file(path: str) -> dict:
    """A digest file, parsed and checked for the shape `changeflow digest` writes (a one-line UsageError)."""
    from ..audit import digests

    from ..audit import proofs

    data = _read(path, "digest")
    try:
        return proofs.parse_any_digest(wire.loads(data))  # every field checked before use (check_digest)
    except digests.NotADigest as exc:
        raise UsageError(f"{path}: {exc}") from exc
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested past the parser's depth
        raise UsageError(f"{path}: not a JSON digest ({str(exc).splitlines()[0][:200]})") from exc


def _refused(exc: Exception) -> int:
    print(f"changeflow: proof refused: {exc}", file=sys.stderr)
    return REJECTED


def cmd_proof(args) -> int:
    from ..audit import proofs, verify

    client = targets.client_for(args) if args.digest.startswith("s3://") else None
    tree = None
    if client is not None:  # a chained digest in the bucket: its heads come from the chain up to it
        chain = _chain_at(client, args.digest)
        if not chain.digests:
            raise NotFound(f"no digest of this stack at {args.digest}: {chain.findings[0]}")
        digest, tree = chain.digests[-1].document, chain.tree
    else:
        digest = _digest_file(args.digest)
        client = targets.client_for(args)
    try:
        proof = proofs.prove(client, args.entity, args.version, digest, tree)
    except proofs.ProofRejected as exc:
        if exc.name == "EntityNotInDigest" and not verify.verify(client, args.entity).found:
            raise no_such_entity(args.entity) from exc
        return _refused(exc)
    text = proofs.dumps(proof)
    if args.output and args.output != "-":
        Path(args.output).write_text(text, encoding="utf-8", newline="")
        print(f"proof of version {args.version} of {args.entity!r} ({len(proof['links'])} later versions to the "
              f"head at the digest, a Merkle path of {len(proof['merkle']['path'])}), written to {args.output}")
    else:
        sys.stdout.write(text)
    return OK


def cmd_verify_proof(args) -> int:
    """Nothing but the two files: no stack, no client, no network."""
    from ..audit import proofs

    digest = _digest_file(args.digest)
    try:
        proof = proofs.loads(_read(args.proof, "proof"))
        proven = proofs.verify_proof(proof, digest, entity_id=args.entity, version=args.version)
    except proofs.ProofInvalid as exc:
        raise UsageError(f"{args.proof}: {exc}") from exc
    except proofs.ProofRejected as exc:
        return _refused(exc)
    if args.json:
        dump({"ok": True, **proven})
    else:
        later = proven["head"] - proven["version"]
        linked = (f"{later} later version{'s' if later != 1 else ''} link it to the head it recorded, version "
                  f"{proven['head']}" if later else "it is the head it recorded")
        print(f"proven: version {proven['version']} of {proven['entityId']!r} (change {proven['changeId']}, recorded "
              f"{proven['recorded']}) is what the digest taken {proven['takenAt']} (root "
              f"{proven['root'][:16]}...) committed to: {linked}")
    return OK


def cmd_repair(args) -> int:
    from ..audit import repair, verify

    client = targets.client_for(args)
    if not verify.verify(client, args.entity).found:
        raise no_such_entity(args.entity)
    done, cannot = repair.repair(client, args.entity)
    if args.json:
        dump({"entityId": args.entity, "repaired": done, "cannotRepair": cannot})
    else:
        for line in done:
            print(f"repaired: {line}")
        for line in cannot:
            print(f"cannot repair: {line}")
        if not done and not cannot:
            print(f"{args.entity}: nothing to repair")
    return REJECTED if cannot else OK


def add_verify(command) -> None:
    verify = command("verify", "check an entity's versions (contiguous, consistent, v0 matches history)",
                     exits=exit_help("0  every entity checked is consistent (and unchanged since --since-digest)",
                                     "1  problems found (a gap, a broken hash chain, a change since the digest, a "
                                     "version no execution wrote, a principal AWS's logs do not vouch for, a digest "
                                     "file whose root does not match), or "
                                     "no such entity (or one the digest does not name)",
                                     EXIT_2, EXIT_3_REMOTE))
    add_remote_options(verify)
    which = verify.add_mutually_exclusive_group(required=True)
    which.add_argument("entity", nargs="?", help="entity id")
    which.add_argument("--all", action="store_true", help="every entity (scans the tables)")
    which.add_argument("--digests", metavar="S3URL",
                       help="check the stack's chain of digests at s3://bucket/prefix/ (its DigestLocation output) "
                            "and the table against every head they committed")
    verify.add_argument("--since-digest", metavar="FILE|S3URL",
                        help="prove that nothing recorded before this digest (changeflow digest, or one of the "
                             "stack's at s3://bucket/prefix/NNNNNNNNNNNN.json) has changed since")
    verify.add_argument("--executions", action="store_true",
                        help="also check that each version's executionArn names the execution that wrote it "
                             "(one DescribeExecution per version; past 90 days and on Express, its execution log)")
    verify.add_argument("--principals", action="store_true",
                        help="also match each version's principal with what AWS wrote when the change came in: the "
                             "API's access log (api), the events journal (events); docs/identity.md")
    verify.set_defaults(func=cmd_verify)


def add_digest(command) -> None:
    digest = command("digest", "each entity's head version and chain hash, with a Merkle root: keep it elsewhere",
                     "Print a digest: per entity, its head version and that version's chain hash; with --all, a "
                     "Merkle root over every entity's head and the time it was taken. Keep it outside the account "
                     "(another account, an S3 bucket with Object Lock); `changeflow verify --since-digest FILE` "
                     "later proves that nothing recorded before it has changed. The stack also takes its own, "
                     "chained, every hour, into a compliance-locked bucket: `changeflow verify --digests S3URL`.",
                     exit_help("0  the digest was printed or written", "1  no such entity", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(digest)
    which = digest.add_mutually_exclusive_group(required=True)
    which.add_argument("entity", nargs="?", help="entity id")
    which.add_argument("--all", action="store_true", help="every entity (scans the tables)")
    digest.add_argument("--output", metavar="FILE", help="write the digest to FILE instead of standard output (-)")
    digest.set_defaults(func=cmd_digest)


def add_proof(command) -> None:
    proof = command("proof", "a self-contained proof of one version against a digest, for verify-proof",
                    "Write the proof that VERSION of ENTITY is what the digest FILE committed to: the version's "
                    "item, every later version up to the entity's head at the digest (the chain's links) and the "
                    "Merkle path from that head to the digest's root. `changeflow verify-proof` checks it with no "
                    "access to the table. The proof is checked before it is written: a table that no longer "
                    "matches the digest is refused here.",
                    exit_help("0  the proof was written",
                              "1  refused, by name: no such entity, EntityNotInDigest, VersionAfterDigest (written "
                              "after the digest), VersionGone (deleted or expired), RedactedAfterDigest, "
                              "DigestAltered, "
                              "NoChainAtDigest, "
                              "or the table no longer matches the digest (ChainBroken, HeadMismatch, ...)",
                              "2  bad command line, or a digest file that is unreadable, not JSON or not a digest",
                              EXIT_3_REMOTE))
    add_remote_options(proof, json=False)
    proof.add_argument("entity", help="entity id")
    proof.add_argument("version", type=COUNT, help="the version to prove (1 or more)")
    proof.add_argument("--digest", metavar="FILE|S3URL", required=True,
                       help="a digest (changeflow digest) kept elsewhere, or one of the stack's chained digests at "
                            "s3://bucket/prefix/NNNNNNNNNNNN.json")
    proof.add_argument("--output", metavar="FILE", help="write the proof to FILE instead of standard output (-)")
    proof.set_defaults(func=cmd_proof)


def add_verify_proof(command) -> None:
    check = command("verify-proof", "check a proof of one version against a digest, offline",
                    "Check a proof (changeflow proof) against the digest FILE with nothing else: no stack, no AWS "
                    "client, no network; an auditor runs it on a laptop. Every hash is recomputed: the version's, "
                    "each later link's up to the head the digest recorded, and the Merkle path to the digest's "
                    "root. The proof is read byte for byte as `changeflow proof` wrote it.",
                    exit_help("0  proven",
                              "1  refused, by name: OtherEntity or OtherVersion (not what --entity/--version ask), "
                              "EntityNotInDigest, VersionAfterDigest (written after the digest), OtherDigest, "
                              "DigestAltered, NoChainAtDigest, ChainBroken, ChainTruncated, ChainPastHead, "
                              "HeadMismatch, "
                              "MerklePathMismatch",
                              "2  bad command line, or a proof or digest file that is unreadable, not JSON, not of "
                              "its form (a proof altered in its form or reformatted) or not a digest"))
    check.add_argument("proof", metavar="PROOF", help="the proof file (changeflow proof --output)")
    check.add_argument("--digest", metavar="FILE", required=True, help="the digest the proof is against")
    check.add_argument("--entity", help="refuse the proof unless it is of this entity")
    check.add_argument("--version", type=COUNT, help="refuse the proof unless it is of this version")
    check.add_argument("--json", action="store_true", help="print what was proven as JSON")
    check.set_defaults(func=cmd_verify_proof)


def add_repair(command) -> None:
    repair = command("repair", "write v0's missing history item; say what cannot be repaired",
                     exits=exit_help("0  repaired, or nothing to repair", "1  something cannot be repaired (listed), "
                                     "or no such entity", EXIT_2, EXIT_3_REMOTE))
    add_remote_options(repair)
    repair.add_argument("entity", help="entity id")
    repair.set_defaults(func=cmd_repair)
