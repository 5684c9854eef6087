"""The capacity model's arithmetic (issue 25): token buckets against their closed form, the simulation
against closed-form queues and a hand-computed timeline, the workflow read from the ASL (so that an edit of
the ASL or of a quota reaches the tables of docs/capacity.md), and the page holding what the model renders.

Fast: no embedded stack, small simulations (the whole file in a few seconds)."""

from __future__ import annotations

import json
import math
import random
import re
import shutil
from dataclasses import replace

import pytest
import simpy

from changeflow.capacity import calibration, model, predictions, simulation as sim, tables, workflow
from changeflow.capacity.quotas import QUOTAS, quotas
from changeflow_core import decisions
from changeflow_core.validation import Change
from conftest import ASL, ROOT


@pytest.fixture(scope="module")
def flow():
    return workflow.read(ASL)


# --- token buckets ----------------------------------------------------------------------------------------
def test_a_token_bucket_admits_its_burst_then_its_refill_rate():
    bucket = model.TokenBucket(bucket=1300, refill=300)  # Standard's StartExecution
    # GIVEN 1,000 requests/s from a full bucket: all admitted until the bucket empties, after 1300 / 700 s
    assert bucket.burst_seconds(1000) == pytest.approx(1300 / 700)
    assert bucket.admitted(1000, 1300 / 700) == pytest.approx(1000 * 1300 / 700)
    # THEN the refill rate alone: 10 s admit the bucket plus 10 refills, not 10,000
    assert bucket.admitted(1000, 10) == 1300 + 3000
    assert bucket.steady(1000) == 300
    # AND under the refill rate nothing is ever throttled
    assert bucket.burst_seconds(200) == math.inf
    assert bucket.admitted(200, 100) == 200 * 100


@pytest.mark.parametrize("rate, seconds", [(1000, 10), (200, 5), (6000, 2)])
def test_the_simulations_bucket_admits_what_the_closed_form_says(rate, seconds):
    env = simpy.Environment()
    bucket = sim.Bucket(env, 1300, 300)
    admitted = []

    def requests():
        for _ in range(int(rate * seconds)):
            admitted.append(bucket.try_take())
            yield env.timeout(1 / rate)

    env.process(requests())
    env.run()
    assert sum(admitted) == pytest.approx(model.TokenBucket(1300, 300).admitted(rate, seconds), abs=2)


def test_a_bucket_that_makes_a_request_wait_delays_it_by_the_refill_time():
    env = simpy.Environment()
    bucket, times = sim.Bucket(env, 2, 10), []

    def taker():
        for _ in range(5):
            yield from bucket.take()
            times.append(env.now)

    env.process(taker())
    env.run()
    assert times == pytest.approx([0, 0, 0.1, 0.2, 0.3])


# --- the simulation against closed forms ------------------------------------------------------------------
def test_the_one_process_server_is_an_m_m_1_queue(flow):
    # GIVEN the embedded stack's one process, Poisson arrivals (λ = 5/s), exponential work (mean 0.1 s: μ = 10)
    platform = sim.Platform("one process", transition=sim.fixed(0), invoke=sim.fixed(0), handler=sim.fixed(0),
                            read=sim.fixed(0), write=sim.fixed(0), one_process=True)
    run = sim.Simulation(platform, flow, seed=7)
    rng, sojourns = random.Random(3), []

    def job():
        started = run.env.now
        yield from run.busy_for(sim.Dist(0.1, kind="exp"), sim.Result("x"))
        sojourns.append(run.env.now - started)

    def arrivals():
        for _ in range(20_000):
            yield run.env.timeout(rng.expovariate(5))
            run.env.process(job())

    run.env.process(arrivals())
    run.env.run()
    # THEN the mean time in the system is M/M/1's 1 / (μ - λ) = 0.2 s
    assert sum(sojourns) / len(sojourns) == pytest.approx(1 / (10 - 5), rel=0.08)


def deterministic(T=0.02, I=0.01, R=0.004, W=0.006):
    return sim.Platform("fixed", transition=sim.fixed(T), invoke=sim.fixed(I), handler=sim.fixed(0),
                        read=sim.fixed(R), write=sim.fixed(W))


def test_one_change_takes_the_sum_of_its_steps(flow):
    T, I, R, W = 0.02, 0.01, 0.004, 0.006
    run = sim.Simulation(deterministic(T, I, R, W), flow)
    run.k_writers(1)
    [result] = run.run()
    # fetch (T + I + R), write (T + I + W), history with its expiry tags (T + I + W; no window: no tag)
    assert result.outcome == "applied"
    assert result.seconds == pytest.approx(3 * T + 3 * I + R + 2 * W)
    assert (result.transitions, result.invocations, result.read_units, result.write_units) == (3, 3, 1, 4)


def test_two_writers_at_once_one_conflicts_and_backs_off_exactly_one_second(flow):
    # GIVEN two changes to one entity at the same instant, fixed latencies: both read version 0
    T, I, R, W = 0.02, 0.01, 0.004, 0.006
    run = sim.Simulation(deterministic(T, I, R, W), flow)
    run.k_writers(2)
    first, second = sorted(run.run(), key=lambda r: r.seconds)
    # THEN the first applies as if alone; the second's write meets version 1 (a conflict, decided by
    # changeflow_core), draws its back-off from MathRandom(1, 2) (always 1 s), reads again and applies
    assert (first.outcome, second.outcome) == ("applied", "applied")
    assert first.seconds == pytest.approx(3 * T + 3 * I + R + 2 * W)
    assert second.seconds == pytest.approx(7 * T + 5 * I + 2 * R + 3 * W + 1)
    assert (second.transitions, second.invocations, second.conflicts) == (7, 5, 1)
    summary = sim.summary([first, second])
    assert summary["transitions_per_applied"] == 5 and summary["version_conflicts"] == 0
    assert run.entities["hot#1"].latest["version"] == 2


def test_writers_past_the_cores_attempts_end_in_version_conflict(flow):
    # GIVEN a workflow allowing 2 conditional writes, and 6 writers in lock-step on one key
    run = sim.Simulation(deterministic(), replace(flow, max_attempts=2))
    run.k_writers(6)
    outcomes = [r.outcome for r in run.run()]
    # THEN the writers that lost twice end VersionConflict (steps.take's rule), the rest applied
    assert outcomes.count("VersionConflict") > 0
    assert outcomes.count("applied") == run.entities["hot#1"].latest["version"]
    assert set(outcomes) == {"applied", "VersionConflict"}


def test_an_older_change_after_a_newer_one_is_stale_in_two_transitions(flow):
    run = sim.Simulation(deterministic(), flow)
    run.env.process(run.execution(Change("e#1", "put", 2000, "new")))

    def later():
        yield run.env.timeout(1)
        yield from run.execution(Change("e#1", "put", 1000, "old"))

    run.env.process(later())
    new, old = run.run()
    assert (new.outcome, old.outcome) == ("applied", "stale")
    assert (old.transitions, old.invocations, old.write_units) == (2, 2, 0)


def test_the_rules_are_changeflow_cores_and_a_resent_change_is_a_duplicate(flow):
    # the simulation decides with the domain layer's functions, not copies of them
    assert sim.decide is decisions.decide and sim.classify_failed_write is decisions.classify_failed_write
    run = sim.Simulation(deterministic(), flow)
    run.env.process(run.execution(Change("e#1", "put", 1000, "c-1")))

    def resent():
        yield run.env.timeout(1)
        yield from run.execution(Change("e#1", "put", 1000, "c-1"))

    run.env.process(resent())
    first, again = run.run()
    # THEN the resend is a duplicate (v0 remembers its id): the whole path, and nothing written
    assert (first.outcome, again.outcome) == ("applied", "duplicate")
    assert (again.transitions, again.write_units) == (3, 0)
    assert run.entities["e#1"].latest["version"] == 1


def test_start_throttling_admits_the_bucket_and_its_refill(flow):
    # GIVEN AWS Standard: its StartExecution bucket is the quota table's
    platform = sim.aws(quotas(), standard=True)
    assert platform.start_bucket == (1300, 300)
    # WHEN a Poisson stream of 100/s runs for 3 s against a smaller bucket (50, refill 20/s: a fast test)
    run = sim.Simulation(replace(platform, start_bucket=(50, 20)), flow, seed=2)
    run.poisson(100, 10**6, 3.0)
    summary = sim.summary(run.run())
    admitted = summary["executions"] - summary["throttled_starts"]
    # THEN StartExecution admits what its bucket allows: 50 + 20/s × 3 s, and refuses the rest
    assert admitted == pytest.approx(model.TokenBucket(50, 20).admitted(100, 3.0), abs=3)
    assert summary["throttled_starts"] > 100


# --- the workflow, read from the ASL ----------------------------------------------------------------------
def test_the_workflow_is_read_from_the_asl(flow):
    assert [s.name for s in flow.applied] == ["Fetch the latest version", "Write the new latest version",
                                             "Record the version in history"]
    assert (flow.transitions_per_applied, flow.transitions_per_conflict) == (3, 4)
    assert (flow.invocations_per_applied, flow.invocations_per_conflict) == (3, 2)
    assert flow.max_attempts == decisions.MAX_ATTEMPTS
    assert [flow.backoff_range(a) for a in (1, 2, 3, 9)] == [(1, 1), (1, 2), (1, 4), (1, 32)]
    history = flow.steps["Record the version in history"]
    assert history.retry_for("HistoryConflict") is None
    assert history.retry_for("Lambda.TooManyRequestsException").max_attempts == 6
    assert flow.steps["Write the new latest version"].retry_for("States.TaskFailed") is None  # never retried


def edited_asl(tmp_path, edit) -> "Path":  # noqa: F821
    definition = json.loads(ASL.read_text())
    edit(definition)
    path = tmp_path / "change.asl.json"
    path.write_text(json.dumps(definition))
    return path


def test_a_changed_back_off_in_the_asl_shows_in_the_tables(tmp_path):
    before = tables.model_blocks(ROOT)

    def slower(d):
        drawn = d["States"]["Draw a back-off"]["Parameters"]
        drawn["waitSeconds.$"] = drawn["waitSeconds.$"].replace("States.Array(2, 2, 3, 5, 9, 17, 33, 33, 33, 33, 33, 33)",
                                                                "States.Array(3, 3, 5, 9, 17, 33, 65, 65, 65, 65, 65, 65)")
    after = tables.model_blocks(ROOT, asl=edited_asl(tmp_path, slower))
    assert "| 1, 2, 4, 8, 16, 32, 32, 32, 32 |" in before["capacity-workflow"]
    assert "| 2, 4, 8, 16, 32, 64, 64, 64, 64 |" in after["capacity-workflow"]
    assert "| back-off waits of a change that conflicts every time (s) | 318 |" in after["capacity-workflow"]
    assert workflow.read(edited_asl(tmp_path, slower)).backoff_range(1) == (1, 2)


def test_a_state_added_to_the_happy_path_raises_the_transition_wall(tmp_path):
    def one_more(d):
        d["States"]["Write the new latest version"]["Next"] = "Note the write"
        d["States"]["Note the write"] = {"Type": "Pass", "Next": "Record the version in history"}
    path = edited_asl(tmp_path, one_more)
    assert workflow.read(path).transitions_per_applied == 4
    walls = tables.model_blocks(ROOT, asl=path)
    assert "| state transitions per applied change | 4 |" in walls["capacity-workflow"]
    # 1,000 changes/s × 4 transitions on a 1,500/s refill: 267% (it is 3: 200%)
    assert re.search(r"\| SFN transitions \| 27% \| 267% \|", walls["capacity-load"])


def test_an_asl_without_the_conflict_loop_is_refused_by_name(tmp_path):
    def no_catch(d):
        d["States"]["Write the new latest version"]["Catch"] = [
            c for c in d["States"]["Write the new latest version"]["Catch"] if "WriteConflict" not in c["ErrorEquals"]]
    with pytest.raises(workflow.WorkflowShapeError, match="WriteConflict"):
        workflow.read(edited_asl(tmp_path, no_catch))


# --- quotas and walls -------------------------------------------------------------------------------------
def test_every_quota_is_cited_with_the_day_it_was_read():
    for q in QUOTAS:
        assert q.source.startswith("https://") and re.fullmatch(r"\d{4}-\d{2}-\d{2}", q.read_on), q.key
        assert q.rate > 0 and q.adjustable


def test_a_quota_increase_moves_the_wall_in_the_tables():
    before = tables.model_blocks(ROOT)["capacity-walls"]
    after = tables.model_blocks(ROOT, tables.with_quota(quotas(), "sfn_standard_start", 3000))["capacity-walls"]
    row = lambda text: next(line for line in text.splitlines()  # noqa: E731
                            if line.startswith("| Standard | 1,000 through EventBridge |"))
    assert "StartExecution, Standard" in row(before) and "333%" in row(before)
    # with StartExecution at 3,000/s, the transition bucket (3 × 1,000 on 1,500/s) is the first wall
    assert "StateTransition, Standard" in row(after) and "200%" in row(after)
    with pytest.raises(KeyError):
        quotas(no_such_quota=1)


def test_the_hot_key_limit_is_the_lower_of_the_partition_and_optimistic_concurrency():
    demand = model.Demand(4, 4, 1, 1, 4, 0.03)
    hot = model.hot_key(demand, quotas(), window_s=0.05)
    assert (hot.partition_limit, hot.occ_limit, hot.binding) == (250, 20, "occ")
    fast = model.hot_key(demand, quotas(), window_s=0.001)
    assert (fast.limit, fast.binding) == (250, "ddb_partition_write")


def test_lambda_concurrency_follows_littles_law(flow):
    demand = model.demand_of(flow, (1, 4), invocation_seconds=0.05)
    loads = {load.quota.key: load for load in model.loads(1000, False, demand, quotas())}
    # 1,000 changes/s × (3 + 1 SubmitChange) invocations × 0.05 s = 200 concurrent of 1,000
    assert loads["lambda_concurrency"].demand == pytest.approx(200)
    assert loads["lambda_concurrency"].headroom == pytest.approx(5)


# --- the page ---------------------------------------------------------------------------------------------
def test_the_page_holds_the_models_tables_as_the_model_renders_them_today():
    page = tables.blocks_in((ROOT / "docs" / "capacity.md").read_text(encoding="utf-8"))
    rendered = tables.model_blocks(ROOT)
    for name in tables.MODEL_BLOCKS:
        assert page[name] == rendered[name], (f"{name} is stale: run `.venv/bin/changeflow capacity --model-only "
                                              "--write` (a second) or make capacity")
    for name in tables.SIMULATED_BLOCKS:
        assert page[name].startswith("Simulated on ") and "`make capacity`" in page[name]


def test_the_calibration_reads_make_costs_contention_rows():
    rows = calibration.measured_contention(ROOT / "docs" / "cost.md")
    assert {10, 50, 200} <= set(rows)
    assert rows[10]["transitions_per_applied"] > 3 and re.fullmatch(r"\d{4}-\d{2}-\d{2}", rows[10]["measured_on"])


def test_replacing_a_block_needs_its_markers():
    with pytest.raises(ValueError, match="capacity-walls"):
        tables.replace_blocks("# no markers\n", {"capacity-walls": "| a |\n|---|"})


def test_changeflow_capacity_model_only_prints_the_walls(capsys, monkeypatch, tmp_path):
    from changeflow.cli import main

    monkeypatch.chdir(ROOT)
    assert main(["capacity", "--model-only"]) == 0
    out = capsys.readouterr().out
    assert "capacity-walls:" in out and "one entity:" in out and "capacity-calibration" not in out


def test_a_copy_of_the_project_with_a_granted_increase_renders_other_walls(tmp_path):
    # the model reads the project it is given: the ASL and the cost table of that copy
    for part in ("statemachines", "docs"):
        shutil.copytree(ROOT / part, tmp_path / part)
    cost = (ROOT / "docs" / "cost.md").read_text()
    granted, edits = re.subn(r"\| update \| applied \| \d+ / \d+ \|", "| update | applied | 1 / 8 |", cost)
    assert edits >= 1, "docs/cost.md has no update row to edit"
    (tmp_path / "docs" / "cost.md").write_text(granted)
    walls = tables.model_blocks(tmp_path)
    assert "| DynamoDB read / write units per applied update (1 KB) | 1 / 8 |" in walls["capacity-workflow"]
    assert re.search(r"\| table-level writes, on demand \| 2% \| 20% \| 200% \|", walls["capacity-load"])


def test_a_bad_contention_list_is_one_line_and_status_2(capsys, monkeypatch):
    from changeflow.cli import main

    monkeypatch.chdir(ROOT)
    assert main(["capacity", "--model-only", "--contention", "10,many"]) == 2
    assert "--contention '10,many': give whole numbers" in capsys.readouterr().err


# --- the prediction runs (issue 38: make capacity crashed in it, and no test ran it) ----------------------
def test_the_prediction_prices_every_row_with_the_logs_it_is_given(flow):
    # GIVEN the logs a change writes (per invocation, per caught error) and the same without any
    logs = {"function_bytes_per_invocation": 1273.0, "execution_bytes_per_caught_error": 1884.0}
    quiet = {"function_bytes_per_invocation": 0.0, "execution_bytes_per_caught_error": 0.0}
    small = dict(seeds=1, k=20, rate=200, entities=1000, seconds=1.0, warmup=0.5)
    # WHEN the prediction runs on a small budget (the make capacity code path, not its figures)
    rows = predictions.predict(quotas(), flow, logs, **small)
    bare = predictions.predict(quotas(), flow, quiet, **small)
    # THEN every scenario has a price on both workflow types, and the logs are in it: $0.50 per GB of the
    # invocations' bytes, and of the caught errors' (a conflict is one caught write) on the hot key
    assert [(r["scenario"].split(" ")[0], r["platform"]) for r in rows] == [
        ("K", "AWS Standard"), ("200/s", "AWS Standard"), ("200/s", "AWS Standard"),
        ("K", "AWS Express"), ("200/s", "AWS Express"), ("200/s", "AWS Express")]
    for row, without in zip(rows, bare):
        conflicts = (row["transitions_per_applied"] - flow.transitions_per_applied) / flow.transitions_per_conflict
        logged = row["invocations_per_applied"] * 1273.0 + max(0.0, conflicts) * 1884.0
        assert row["cost"] - without["cost"] == pytest.approx(logged / 1e9 * 0.50 * 1e6, rel=1e-6)
        assert row["cost"] > 0


# --- the stack's own limits (issue 38.4) -------------------------------------------------------------------
def test_the_stage_throttle_is_read_from_the_template_and_is_the_first_wall_through_the_api(flow, tmp_path):
    stage = quotas(ROOT / "template.yaml")["api_stage"]
    assert (stage.rate, stage.bucket) == (100, 200)  # ApiThrottlingRateLimit, ApiThrottlingBurstLimit
    demand = model.demand_of(flow, (1, 4), 0.03)
    table = quotas(ROOT / "template.yaml")
    for standard in (True, False):
        for rate in model.RATES:  # 10², 10³, 10⁴ changes/s through POST /changes: the stage first
            assert model.binding(model.loads(rate, standard, demand, table, "api")).quota.key == "api_stage"
        # EventBridge and direct starts do not go through the stage
        assert "api_stage" not in {r.quota.key for r in model.loads(100, standard, demand, table, "events")}
    # the read routes take from the same bucket: 50 changes/s and one read each fill it
    shared = next(r for r in model.loads(50, False, demand, table, "api", reads_per_change=1) if r.quota.key == "api_stage")
    assert shared.utilisation == pytest.approx(1.0)
    # a deploy with a higher limit moves the wall (the template's parameter, not a constant)
    raised = (ROOT / "template.yaml").read_text().replace("    Default: 100\n    MinValue: 1\n    Description: Steady-state",
                                                       "    Default: 2000\n    MinValue: 1\n    Description: Steady-state")
    (tmp_path / "template.yaml").write_text(raised)
    assert quotas(tmp_path / "template.yaml")["api_stage"].rate == 2000


def test_each_resend_on_standard_is_a_describe_execution_and_its_quota_bounds_them(flow):
    demand = model.demand_of(flow, (1, 4), 0.03)
    table = quotas(ROOT / "template.yaml")
    rows = {r.quota.key: r for r in model.loads(10, True, demand, table, "api", resends_per_change=2)}
    assert rows["sfn_describe_execution"].demand == 20 and rows["sfn_describe_execution"].utilisation > 1  # 15/s
    assert rows["api_stage"].demand == 30  # the resends are requests of the stage too
    express = {r.quota.key for r in model.loads(10, False, demand, table, "api", resends_per_change=2)}
    assert "sfn_describe_execution" not in express  # Express reads v0 instead


# --- honest calibration (issue 38.4): fit on one run, judge on another --------------------------------------
def embedded_like(flow):
    """A one-process platform with fixed latencies (fast to simulate), like the embedded stack's."""
    return sim.Platform("embedded", transition=sim.fixed(0.01), invoke=sim.fixed(0.0), handler=sim.fixed(0.005),
                        read=sim.fixed(0.0), write=sim.fixed(0.0), one_process=True, start=sim.fixed(0.002))


def rows_of(platform, flow, ks, label, **scheduling):
    """What a "measured" run would record, made by the simulation itself at known scheduling figures."""
    truth = replace(platform, **scheduling)
    return {k: {**{key: calibration.simulate_k(truth, flow, k, seeds=1)[key] for key, _ in calibration.COMPARED},
                "applied": float(k), "measured_on": label} for k in ks}


def test_the_fit_finds_scheduling_figures_inside_their_range_where_the_runs_put_them(flow):
    platform = embedded_like(flow)
    measured = rows_of(platform, flow, (3, 8), "fit run", interleave=0.6, transition_held=0.4)
    fitted = calibration.fit(platform, flow, measured, seeds=1, ks=(3, 8))
    # THEN it is a point inside both ranges (the coarse grid spans 0..1 and is refined around its best)
    assert fitted["edges"] == [] and 0 < fitted["interleave"] < 1 and 0 < fitted["transition_held"] < 1
    # AND it reproduces the runs it was fitted on at least as well as the figures that made them
    truth = calibration.fit_error(replace(platform, interleave=0.6, transition_held=0.4), flow, measured, 1, (3, 8))
    assert fitted["error"] <= truth + 1e-9
    # AND the same rows give the same fit: seeded simulations, ties broken by the grid's order
    assert calibration.fit(platform, flow, measured, seeds=1, ks=(3, 8)) == fitted


def test_a_fit_pushed_to_the_end_of_a_range_says_so(flow):
    platform = embedded_like(flow)
    # runs with far fewer transitions than any interleaving gives: only "the oldest runs on" comes near
    measured = {k: {"transitions_per_applied": 4.0, "version_conflicts": 0.0, "p50_s": 0.05, "p99_s": 0.1,
                    "applied": float(k), "measured_on": "fit run"} for k in (3, 8)}
    fitted = calibration.fit(platform, flow, measured, seeds=1, ks=(3, 8), coarse=3, refine=False)
    assert fitted["edges"], fitted  # reported, not hidden: the measured contention lies beyond the model's range


def test_verdicts_are_given_on_held_out_rows_only_and_list_every_one_outside(flow):
    platform = embedded_like(flow)
    held = rows_of(platform, flow, (3,), "held-out run", interleave=0.6, transition_held=0.4)
    held[3]["p50_s"] *= 2  # a held-out figure twice what the simulation says
    fitted_on = {3: {**held[3], "p50_s": held[3]["p50_s"] * 10, "measured_on": "fit run"}}
    model_ = replace(platform, interleave=0.6, transition_held=0.4)
    rows = (calibration.calibrate(model_, flow, held, 1, (3,), "held out")
            + calibration.calibrate(model_, flow, fitted_on, 1, (3,), "fitted on"))
    outside = calibration.verdicts(rows)
    # THEN the held-out p50 is listed (the fitted-on row, worse still, is shown but never a verdict)
    assert [(o["k"], o["figure"]) for o in outside] == [(3, "p50 s")]
    assert outside[0]["ratio"] == pytest.approx(0.5)
    # AND a second run over the same rows gives the same verdicts: the logic depends on the rows alone
    again = (calibration.calibrate(model_, flow, held, 1, (3,), "held out")
             + calibration.calibrate(model_, flow, fitted_on, 1, (3,), "fitted on"))
    assert calibration.verdicts(again) == outside
    block = tables.calibration_block(rows, {"measured_at": "now", "changes": 4, "invocation_s": {"median": 0.005, "p99": 0.01},
                                            "transition_s": {"median": 0.01, "p99": 0.02}, "start_s": {"median": 0.002}},
                                     {"interleave": 0.6, "transition_held": 0.4, "edges": [], "points": 45}, "today", outside)
    assert "Held out: 1 of 4 figures beyond ±25%: K = 3 p50 s (×0.50)." in block
