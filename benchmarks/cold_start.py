"""Cold start of each function as `sam build` produced it, on python3.13, read-only: with the layer's
bytecode (as the layer now ships) against the same layer with every .pyc removed (as it shipped before).

What Lambda does on a cold start is, for this measurement, one fresh interpreter that imports the handler
module with the function's code and the layer's /opt/python on the path. Lambda's /var/task and /opt are
read-only, so the interpreter cannot cache what it compiles: each run here sets PYTHONDONTWRITEBYTECODE
(this machine runs as root, which file permissions would not stop) and the script checks afterwards that
the build directory gained no .pyc. boto3 comes with the Lambda runtime, compiled; here it is installed
for python3.13 once, compiled, under .aws-sam/cold-start/ (pip, same version as the dev venv).

Runs alternate between the two layers, and the figure that matters is the ratio in the same run: this
machine is shared, so absolute times are noisy. Usage: python benchmarks/cold_start.py [--runs 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".aws-sam" / "cold-start"
LAMBDA_PYTHON = "3.13"

# What an init does before the handler is called: import the handler module (its module-level clients,
# Powertools Logger/Tracer/Metrics), timed inside the fresh interpreter so process start-up is excluded.
PROBE = r"""
import importlib, sys, time
start = time.perf_counter()
importlib.import_module("app")
print(time.perf_counter() - start)
"""


def python313() -> str:
    """The python3.13 interpreter: on PATH, else through pyenv. Never the dev venv's."""
    for command in ([f"python{LAMBDA_PYTHON}"], ["pyenv", "exec", "python"]):
        env = dict(os.environ)
        if command[0] == "pyenv":
            versions = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True).stdout.split()
            match = [v for v in versions if v.startswith(LAMBDA_PYTHON + ".")]
            if not match:
                continue
            env["PYENV_VERSION"] = match[0]
        try:
            found = subprocess.run([*command, "-c", "import sys; print(sys.executable)"], env=env,
                                   capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            continue
        if found:
            return found
    sys.exit(f"python{LAMBDA_PYTHON} not found (pyenv install {LAMBDA_PYTHON}): Lambda runs it, so the benchmark does")


def sam_build(python: str, build_dir: Path) -> None:
    """`sam build` with the template's own runtime (python3.13), that interpreter first on PATH."""
    metadata = WORK / "samcli"
    metadata.mkdir(parents=True, exist_ok=True)
    (metadata / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    remove(build_dir)
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "sam"), "build", "--parameter-overrides", f"Runtime=python{LAMBDA_PYTHON}",
         "--build-dir", str(build_dir)],
        cwd=ROOT, check=True, capture_output=True,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0", "__SAM_CLI_APP_DIR": str(metadata),
             "PATH": f"{Path(python).parent}:{os.environ['PATH']}"})


def lambda_runtime_packages(python: str) -> Path:
    """boto3 as the Lambda runtime has it: installed for python3.13 and compiled (cached between runs)."""
    import boto3

    target = WORK / f"runtime-boto3-{boto3.__version__}"
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target",
                        str(target), f"boto3=={boto3.__version__}"], check=True)
        subprocess.run([python, "-m", "compileall", "-q", "-j", "0", str(target)], check=True)
        (target / ".complete").touch()
    return target


def pyc_count(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*.pyc"))


def read_only(folder: Path, writable: bool = False) -> None:
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode | 0o200 if writable else mode & ~0o222)


def remove(folder: Path) -> None:
    if folder.exists():
        read_only(folder, writable=True)
        shutil.rmtree(folder)


def function_environment(logical_id: str) -> dict[str, str]:
    """The function's variables as the template gives them (Globals merged), as Lambda would set them."""
    from changeflow.local.template import Template

    template = Template(ROOT / "template.yaml")
    variables = template.function_properties(logical_id).get("Environment", {}).get("Variables", {})
    return {key: str(value) for key, value in variables.items()}


def cold_start(python: str, code: Path, layer: Path, runtime: Path) -> float:
    env = {**function_environment(code.name), "PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1",
           "LANG": "C.UTF-8", "PYTHONPATH": os.pathsep.join([str(code), str(layer / "python"), str(runtime)]),
           "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
           "AWS_LAMBDA_FUNCTION_NAME": code.name}
    out = subprocess.run([python, "-s", "-c", PROBE], cwd=code, env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def quick_build(build: Path) -> tuple[str, Path]:
    """``--quick`` (the test of ``make bench``): no sam build and no pip: the functions' sources and the layer's
    packages as ``make lambda-runtime`` installed them for python3.13 (``.venv-lambda``, boto3 with it) stand
    in for the build, copied as sam build lays them out."""
    venv = ROOT / ".venv-lambda"
    remove(build)
    from changeflow.local.template import Template

    template = Template(ROOT / "template.yaml")
    for logical_id in template.of_type("AWS::Serverless::Function"):  # sam build's folders: by logical id
        code = ROOT / template.function_properties(logical_id)["CodeUri"]
        shutil.copytree(code, build / logical_id, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(venv / "opt" / "python", build / "CoreLayer" / "python", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "layers" / "core" / "changeflow_core", build / "CoreLayer" / "python" / "changeflow_core",
                    ignore=shutil.ignore_patterns("__pycache__"))
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0", str(build / "CoreLayer")], check=True)
    empty = WORK / "runtime-in-venv"
    empty.mkdir(parents=True, exist_ok=True)
    return python, empty


def measure(runs: int, quick: bool = False) -> dict:
    build = WORK / ("quick-build" if quick else "build")
    if quick:
        python, runtime = quick_build(build)
    else:
        python = python313()
        sam_build(python, build)
        runtime = lambda_runtime_packages(python)
    layer = build / "CoreLayer"
    bare = WORK / "CoreLayer-no-bytecode"
    remove(bare)
    shutil.copytree(layer, bare, ignore=shutil.ignore_patterns("__pycache__"))
    shipped_pycs = pyc_count(layer)
    functions = sorted(p for p in build.iterdir() if p.is_dir() and (p / "app.py").exists())
    if quick:  # the test of make bench: one function's two cold starts run the whole code path (9 were 10 s of CPU)
        functions = functions[:1]
    for folder in (build, bare):
        read_only(folder)
    before = pyc_count(build) + pyc_count(bare)
    results = {}
    for code in functions:
        with_bytecode, without = [], []
        for _ in range(runs):  # alternate, so load drifts affect both alike
            with_bytecode.append(cold_start(python, code, layer, runtime))
            without.append(cold_start(python, code, bare, runtime))
        results[code.name] = {"with_bytecode_ms": 1000 * statistics.median(with_bytecode),
                              "without_bytecode_ms": 1000 * statistics.median(without),
                              "ratio": statistics.median(with_bytecode) / statistics.median(without)}
    if pyc_count(build) + pyc_count(bare) != before:
        sys.exit("the build directory gained .pyc files: the measurement was not read-only")
    return {"python": subprocess.run([python, "--version"], capture_output=True, text=True).stdout.strip(),
            "runs": runs, "layer_pyc_files": shipped_pycs, "functions": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="cold starts per function and layer (median)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="one run of one function, no sam build and no pip (the functions' sources and "
                             ".venv-lambda's packages): the test of make bench, not its figures")
    args = parser.parse_args()
    result = measure(1 if args.quick else args.runs, args.quick)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"Cold start (handler module import) on the sam build output, {result['python']}, read-only, "
          f"median of {result['runs']} alternating runs; the layer ships {result['layer_pyc_files']} .pyc files")
    print(f"{'function':<28}{'with bytecode':>15}{'without':>12}{'ratio':>8}")
    for name, row in result["functions"].items():
        print(f"{name:<28}{row['with_bytecode_ms']:>12.0f} ms{row['without_bytecode_ms']:>9.0f} ms{row['ratio']:>8.2f}")


if __name__ == "__main__":
    main()
