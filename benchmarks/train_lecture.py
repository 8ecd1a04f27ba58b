"""Exercise 4 of the solved notebook at the lecture's scale: train/val loss, 20 samples, s/step.

    python benchmarks/train_lecture.py                                  # the lecture's names.txt (default)
    python benchmarks/train_lecture.py --data words.txt                 # any file of one word per line
    python benchmarks/train_lecture.py --variant relu-layernorm         # a variant of the network
    python benchmarks/train_lecture.py --all-variants --steps 10000     # every variant, then one table

It runs the solved notebook's own cells (solutions/backprop_ninja_solved.ipynb, found by their nbgrader
grade ids), in this process and in one namespace, as Run All does with `FULL_RUN = True`:
setup_imports, setup_data (DATA_FILE replaced by --data), setup_params, setup_ex4_forward, ex4_backward
(the reference `manual_backward`), train_loop (its `max_steps = 200_000 if FULL_RUN else 2_000`
replaced by --steps; it seeds, initializes and calls the notebook's `train`), train_calibrate,
train_evaluate and train_sample. The plot and the self-check cells are skipped. A cell's top-level
assignment to an overridden name is removed and the name is set beforehand; nothing else is changed.

Then it times a step of the notebook's `train` (manual backward) against the same loop driven by
autograd (`loss.backward()` on `fused_forward` with leaves that require grad, same batches, same SGD
schedule): alternating rounds of --timing-steps steps after a warm-up, median seconds per step.

With --variant NAME (a name of grader.exercises.makemore_mlp.variants.NAMES, with or without its
`makemore-mlp/`) the same cells run, the same loop, calibration, evaluation, sampling and timing, with
three of the notebook's definitions replaced by the variant's: `init_params` (the exercise's `init`,
the lecture's rules for the variant's pieces), `fused_forward` (the exercise's network, its forward
values as the cache) and `manual_backward` (the variant's reference answer, derived by the rule table).
Batch norm's calibration cell runs only where the variant has batch norm: layer norm takes each
example's statistics over its own features, so one example is normalized alone in training as in
sampling, and without a normalization nothing depends on the batch. --all-variants runs every variant
in turn and ends with one table.

With --check-lecture the exit status is 1 unless train and val loss are within 0.01 of the lecture's
(2.0705 / 2.1099 on names.txt, 200,000 steps).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "solutions" / "backprop_ninja_solved.ipynb"

# The notebook's cells that exercise 4 needs, in order (nbgrader grade ids).
CELLS = ("setup_imports", "setup_data", "setup_params", "setup_ex4_forward", "ex4_backward", "train_loop",
         "train_calibrate", "train_evaluate", "train_sample")

LECTURE_STEPS = 200_000
LECTURE_LOSS = {"train": 2.0705, "val": 2.1099}  # Karpathy's lecture, names.txt
LECTURE_TOLERANCE = 0.01


# ---------------------------------------------------------------------------------------------
# The notebook's cells


def notebook_cells(path: Path = NOTEBOOK) -> dict[str, str]:
    """grade id (or cell id) -> source of every code cell."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return {c.metadata.get("nbgrader", {}).get("grade_id") or c.get("id"): c.source
            for c in nb.cells if c.cell_type == "code"}


def prepare(source: str, overrides: dict) -> str:
    """The cell's source without IPython magics (`%matplotlib inline`) and without its top-level
    assignments to the names in `overrides` (the caller sets those names itself)."""
    source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    tree = ast.parse(source)

    def targets(node) -> set[str]:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            return set()
        return {t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(t, ast.Name)}

    kept = [node for node in tree.body if not targets(node) & set(overrides)]
    assigned = set().union(*map(targets, tree.body))
    if missing := set(overrides) - assigned:
        raise LookupError(f"the cell assigns no {sorted(missing)} at top level: the notebook changed, update "
                          f"{Path(__file__).name}")
    tree.body = kept
    return ast.unparse(tree)


class Indented(io.TextIOBase):
    """A stdout that indents every line it passes on and keeps a copy of what it wrote."""

    def __init__(self, out, prefix: str = "  "):
        self.out, self.prefix, self.text, self.at_line_start = out, prefix, [], True

    def write(self, s: str) -> int:
        self.text.append(s)
        for piece in s.splitlines(keepends=True):
            if self.at_line_start:
                self.out.write(self.prefix)
            self.out.write(piece)
            self.at_line_start = piece.endswith("\n")
        self.out.flush()
        return len(s)


def run_cell(cells: dict[str, str], grade_id: str, namespace: dict, *, quiet: bool = False, **overrides) -> str:
    """Execute one notebook cell in `namespace`, with `overrides` set first; returns what it printed."""
    namespace.update(overrides)
    code = compile(prepare(cells[grade_id], overrides), f"<notebook cell {grade_id}>", "exec")
    out = Indented(io.StringIO() if quiet else sys.stdout)
    with contextlib.redirect_stdout(out):
        exec(code, namespace)
    return "".join(out.text)


# ---------------------------------------------------------------------------------------------
# Timing: the notebook's loop (manual backward) against the same loop driven by autograd


def autograd_train(ns: dict, params: dict, max_steps: int, g) -> list[float]:
    """The notebook's `train` with `manual_backward` replaced by `loss.backward()`: same batches
    (drawn from g in the same order), same forward (`fused_forward`), same SGD schedule."""
    torch, Xtr, Ytr, batch_size = ns["torch"], ns["Xtr"], ns["Ytr"], ns["batch_size"]
    leaves = {name: p.requires_grad_() for name, p in params.items()}
    lossi = []
    for i in range(max_steps):
        ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
        loss, _ = ns["fused_forward"](leaves, Xtr[ix], Ytr[ix])
        for p in leaves.values():
            p.grad = None
        loss.backward()
        lr = 0.1 if i < max_steps // 2 else 0.01
        with torch.no_grad():
            for p in leaves.values():
                p -= lr * p.grad
        lossi.append(loss.log10().item())
    return lossi


def seconds_per_step(ns: dict, steps: int, rounds: int, warmup: int) -> tuple[dict, dict]:
    """Alternating rounds of `steps` steps of each loop, each from the notebook's seeded init."""
    torch = ns["torch"]
    loops = {"manual": lambda p, k, g: ns["train"](p, k, g), "autograd": lambda p, k, g: autograd_train(ns, p, k, g)}

    def run(kind: str, k: int) -> tuple[float, float]:
        g = torch.Generator().manual_seed(ns["SEED"])
        params = ns["init_params"](200, torch.float32, g)
        with contextlib.redirect_stdout(io.StringIO()):  # train prints its progress
            start = time.perf_counter()
            lossi = loops[kind](params, k, g)
            elapsed = time.perf_counter() - start
        return elapsed / k, 10 ** lossi[-1]

    for kind in loops:
        run(kind, warmup)
    times: dict[str, list[float]] = {kind: [] for kind in loops}
    last: dict[str, float] = {}
    for _ in range(rounds):
        for kind in loops:
            per_step, last[kind] = run(kind, steps)
            times[kind].append(per_step)
    return times, last


# ---------------------------------------------------------------------------------------------
# A variant of the network in place of the notebook's


def variant_name(name: str) -> str:
    """`makemore-mlp/relu-layernorm` or `relu-layernorm` -> `relu-layernorm`; ValueError if unknown."""
    from grader.exercises.makemore_mlp.variants import NAMES

    bare = name.removeprefix("makemore-mlp/")
    if bare not in NAMES:
        raise ValueError(f"unknown variant {name!r}: one of {', '.join(NAMES)}")
    return bare


def normalization(name: str) -> str:
    """`batchnorm`, `layernorm` or `none`: whether training statistics need calibrating."""
    from grader.exercises.makemore_mlp.variants import parse

    return parse(name).norm.name


def define_variant(ns: dict, name: str) -> None:
    """Set the notebook's `init_params`, `fused_forward` and `manual_backward`, with their signatures, to
    variant `name`'s, so the notebook's own training, calibration, evaluation and sampling cells run it.

    The forward is the exercise's network itself (the text the grader's oracle differentiates); its
    values, every intermediate by name, are the cache. Calibrated batch-norm statistics replace the steps
    `bnmeani` and `bnvar`, as the notebook's `bnstats` does."""
    from grader.authoring import skeleton
    from grader.exercise import Sizes, Step, load

    torch = ns["torch"]
    exercise = load(f"makemore-mlp/{name}")
    network = exercise.network

    def init_params(n_hidden, dtype, g):
        sizes = Sizes(**{**exercise.lecture, "vocab": ns["vocab_size"], "block_size": ns["block_size"],
                         "n_embd": ns["n_embd"], "n_hidden": n_hidden})
        return exercise.init(sizes, g, dtype)

    def fused_forward(params, X, Y=None, bnstats=None):
        # Without targets the loss steps still run (on dummy ones): the network computes the loss last.
        targets = torch.zeros(X.shape[0], dtype=torch.long) if Y is None else Y
        replace = None
        if bnstats is not None:
            replace = {step: Step(step, (), f"{step} calibrated on the training set", lambda value=value: value)
                       for step, value in zip(("bnmeani", "bnvar"), bnstats)}
        values = network.forward(params, {"Xb": X, "Yb": targets}, replace)
        return (None if Y is None else values[network.loss]), values

    function = {"torch": torch, "F": ns["F"]}
    ex4 = exercise.functions[0]
    exec(compile(skeleton.references(exercise)[ex4.cell], f"<answer {ex4.cell}>", "exec"), function)  # noqa: S102
    manual_backward = function[ex4.name]
    ns.update(init_params=init_params, fused_forward=fused_forward, manual_backward=manual_backward)


# ---------------------------------------------------------------------------------------------


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def train_and_report(cells: dict[str, str], args, data_file: str | None, variant: str | None,
                     compare: bool) -> dict | None:
    """One run: the notebook's cells (with `variant`'s definitions in place of its own), training, losses
    (against the lecture's if `compare`), samples and seconds per step, printed; returns the losses, the
    timings and whether the losses are the lecture's; None if the backward returned no gradients."""
    ns: dict = {"__name__": "__notebook__"}
    run_cell(cells, "setup_imports", ns)
    torch = ns["torch"]
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; "
          f"Python {platform.python_version()}, torch {torch.__version__}, {torch.get_num_threads()} torch thread(s)")
    print("\ndata:", data_file or "the lecture's names.txt shipped with the package (default)")
    run_cell(cells, "setup_data", ns, DATA_FILE=data_file)
    run_cell(cells, "setup_params", ns, quiet=True)
    if variant is None:
        run_cell(cells, "setup_ex4_forward", ns)
        run_cell(cells, "ex4_backward", ns)
    else:
        define_variant(ns, variant)

    half = args.steps // 2
    print(f"\ntraining with manual_backward: {args.steps} steps, batch {ns['batch_size']}, n_hidden 200, "
          f"lr 0.1 then 0.01 from step {half}, seed {ns['SEED']}")
    start = time.perf_counter()
    run_cell(cells, "train_loop", ns, max_steps=args.steps)
    train_seconds = time.perf_counter() - start
    if ns.get("lossi") is None:
        print("the notebook's manual_backward returned no gradients: nothing to benchmark", file=sys.stderr)
        return None
    if len(ns["lossi"]) != args.steps:
        raise RuntimeError(f"the notebook's train_loop ran {len(ns['lossi'])} steps, not --steps {args.steps}")
    print(f"  {args.steps} steps in {train_seconds:.1f} s ({train_seconds / args.steps * 1e3:.3f} ms/step)")

    norm = "batchnorm" if variant is None else normalization(variant)
    if norm == "batchnorm":
        print("\nloss, batch norm calibrated on the training set")
        run_cell(cells, "train_calibrate", ns, quiet=True)
    else:
        print("\nloss, nothing to calibrate: "
              + ("layer norm's statistics are each example's own" if norm == "layernorm" else "no normalization"))
        ns["bnstats"] = None
    printed = run_cell(cells, "train_evaluate", ns)
    loss = {split: float(value) for split, value in re.findall(r"^(train|val) loss (\S+)$", printed, re.M)}
    within = lecture_difference(loss) if compare else None

    print("\n20 samples")
    run_cell(cells, "train_sample", ns)

    print(f"\nseconds per step: median of {args.timing_rounds} alternating rounds of {args.timing_steps} steps "
          f"after {args.warmup} warm-up steps, same seed and batches")
    times, last = seconds_per_step(ns, args.timing_steps, args.timing_rounds, args.warmup)
    median = {kind: statistics.median(t) for kind, t in times.items()}
    for kind, label in (("manual", "manual backward  "), ("autograd", "autograd backward")):
        rounds = ", ".join(f"{t * 1e3:.3f}" for t in times[kind])
        print(f"  {label} {median[kind]:.6f} s/step  (rounds, ms: {rounds}; last batch loss {last[kind]:.4f})")
    print(f"  autograd / manual {median['autograd'] / median['manual']:.2f}x")
    return {"first": 10 ** ns["lossi"][0], **loss, **median, "within": within}


def lecture_difference(loss: dict) -> bool:
    """Prints the difference from the lecture's losses; True if within the tolerance."""
    diffs = {split: loss[split] - LECTURE_LOSS[split] for split in LECTURE_LOSS}
    within = all(abs(d) <= LECTURE_TOLERANCE for d in diffs.values())
    print(f"  lecture (names.txt): train {LECTURE_LOSS['train']:.4f}, val {LECTURE_LOSS['val']:.4f}; "
          f"difference train {diffs['train']:+.4f}, val {diffs['val']:+.4f}: "
          f"{'within' if within else 'NOT within'} {LECTURE_TOLERANCE}")
    return within


def table(results: dict[str, dict]) -> None:
    """Every variant's losses and timings, as a Markdown table; a loss that did not fall is flagged."""
    print("| variant | step-0 batch loss | train loss | val loss | manual s/step | autograd s/step "
          "| autograd / manual |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        flag = "" if r["train"] < r["first"] else " (loss did not fall)"
        print(f"| {name}{flag} | {r['first']:.4f} | {r['train']:.4f} | {r['val']:.4f} | {r['manual']:.6f} | "
              f"{r['autograd']:.6f} | {r['autograd'] / r['manual']:.2f}x |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None,
                        help="a file with one word per line (default: the lecture's names.txt "
                             "shipped with the package)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--variant", help="a variant of the network, e.g. relu-layernorm or "
                                         "makemore-mlp/gelu-none-residual (default: the solved notebook's own)")
    which.add_argument("--all-variants", action="store_true", help="every variant in turn, then one table")
    parser.add_argument("--steps", type=int, default=LECTURE_STEPS, help="training steps (default: %(default)s)")
    parser.add_argument("--timing-steps", type=int, default=2_000,
                        help="steps per timing round of each backward (default: %(default)s)")
    parser.add_argument("--timing-rounds", type=int, default=3, help="timing rounds (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=200, help="warm-up steps before timing (default: %(default)s)")
    parser.add_argument("--check-lecture", action="store_true",
                        help=f"exit 1 unless train/val loss are within {LECTURE_TOLERANCE} of the lecture's "
                             f"{LECTURE_LOSS['train']}/{LECTURE_LOSS['val']} (needs --steps {LECTURE_STEPS})")
    args = parser.parse_args(argv)
    if min(args.steps, args.timing_steps, args.warmup) < 10:  # the notebook's train reports every steps // 10
        parser.error("--steps, --timing-steps and --warmup must be at least 10")
    if args.timing_rounds < 1:
        parser.error("--timing-rounds must be at least 1")
    if args.check_lecture and args.steps != LECTURE_STEPS:
        parser.error(f"--check-lecture compares a {LECTURE_STEPS}-step run")
    data_file = None if args.data is None else str(args.data.resolve())
    if data_file is not None and not Path(data_file).is_file():
        parser.error(f"--data {args.data}: no such file")

    os.environ.setdefault("MPLBACKEND", "Agg")  # setup_imports imports pyplot; nothing is plotted
    sys.path.insert(0, str(ROOT))  # the notebook imports the checkout's `grader`, the variants `solutions`
    from grader.exercises.makemore_mlp.variants import LECTURE_VARIANT, NAMES, describe

    variants: list[str | None] = [None]
    if args.all_variants:
        variants = list(NAMES)
    elif args.variant is not None:
        try:
            variants = [variant_name(args.variant)]
        except ValueError as exc:
            parser.error(str(exc))
    if args.check_lecture and variants[0] not in (None, LECTURE_VARIANT):
        parser.error("--check-lecture compares the lecture's network (tanh-batchnorm) only")

    started = time.perf_counter()
    cells = notebook_cells()
    is_names_txt = data_file is None or Path(data_file).name == "names.txt"
    print(f"backprop-ninja: exercise 4 of {NOTEBOOK.relative_to(ROOT)}, run in-process")
    results = {}
    for variant in variants:
        if variant is not None:
            print(f"\n=== makemore-mlp/{variant}: {describe(variant)}")
        compare = variant in (None, LECTURE_VARIANT) and args.steps == LECTURE_STEPS \
            and (is_names_txt or args.check_lecture)
        result = train_and_report(cells, args, data_file, variant, compare)
        if result is None:
            return 1
        results[variant] = result

    if args.all_variants:
        print(f"\nevery variant, {args.steps} steps, data: {data_file or 'names.txt'}")
        table(results)
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    return 1 if args.check_lecture and not results[variants[0]]["within"] else 0


if __name__ == "__main__":
    sys.exit(main())
