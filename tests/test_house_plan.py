"""The house plan (docs/architecture.md), checked on the code itself.

- every stage's rule file has the package of the same name, a functions file is named
  after the rule file it serves, and every command a stage's rules run lives in its package;
  the rule files of the kinds off the grid (rules/kinds/) are the registry's, and their
  rules run the commands of the stages they span;
- the package's imports form no loop, between modules or between packages, and the
  packages import each other only as docs/architecture.md draws it (``core`` imports no
  stage);
- a name is imported from the module that defines it, never through another module that
  imported it (no helper borrowed from another module, no second way to reach it);
- every command of ``python -m imagenet_cog`` resolves to a function, and takes its
  ``--device`` from the shared option;
- the config schema's dataset pattern is the naming module's;
- reading the Snakefile imports no torch: every Snakemake process reads it (each SLURM job's
  two, every dry run), and torch's import costs seconds of each.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from conftest import REPOSITORY, copy_workflow, snakemake_environment

PACKAGE = REPOSITORY / "workflow" / "imagenet_cog"
RULES = REPOSITORY / "workflow" / "rules"
# each stage's input functions, checks and targets, apart from its rules (snakemake --lint)
FUNCTIONS = RULES / "functions"
# the rule files of the probe kinds off the grid (their rules run several stages' commands),
# each with its functions file beside it
KIND_RULES = RULES / "kinds"
# every rule and functions file
RULE_FILES = sorted(RULES.rglob("*.smk"))
ARCHITECTURE = REPOSITORY / "docs" / "architecture.md"
# rule files that are no stage, and packages that are no stage
SHARED_RULE_FILES = {"common"}
SHARED_PACKAGES = {"core", "models", "backbones"}


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, str | None]]:
    """(module, imported name or None) of every import of the package in one module, at any
    depth (commands import heavy modules inside functions)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.startswith("imagenet_cog.")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base != "imagenet_cog" and not base.startswith("imagenet_cog."):
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.append((submodule, None) if submodule in known else (base, alias.name))
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph = defaultdict(set)
    for name, path in known.items():
        for module, _ in imported(name, path, known):
            if module != "imagenet_cog" and module != name:
                graph[name].add(module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(set(graph) | {target for targets in graph.values() for target in targets}):
        if node not in index:
            visit(node)
    return components


def package_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") >= 1 else ""


def package_graph() -> dict[str, set[str]]:
    packages = defaultdict(set)
    for module, targets in import_graph().items():
        for target in targets:
            source, destination = package_of(module), package_of(target)
            if source != destination and source in PACKAGES and destination in PACKAGES:
                packages[source].add(destination)
    return packages


PACKAGES = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}


def documented_imports() -> dict[str, set[str]]:
    """The package imports docs/architecture.md draws, in its block headed `imports`."""
    text = ARCHITECTURE.read_text()
    block = re.search(r"```text imports\n(.*?)```", text, re.S)
    assert block, f"{ARCHITECTURE} has no ```text imports block listing which package imports which"
    documented = {}
    for line in block.group(1).splitlines():
        if "->" in line:
            source, targets = (part.strip() for part in line.split("->", 1))
            documented[source] = {target.strip() for target in targets.split(",") if target.strip()}
    return documented


def test_every_stage_rule_file_has_its_package():
    stages = {path.stem for path in RULES.glob("*.smk")} - SHARED_RULE_FILES
    assert stages, RULES
    missing = sorted(stage for stage in stages if not (PACKAGE / stage / "__init__.py").is_file())
    assert not missing, f"rule files without a package of the same name: {missing}"
    unruled = sorted(PACKAGES - stages - SHARED_PACKAGES)
    assert not unruled, f"packages that are no stage's and not shared: {unruled}"
    strays = sorted(path.name for path in FUNCTIONS.glob("*.smk") if path.stem not in stages)
    assert not strays, f"functions files without a rule file of the same name: {strays}"


def test_the_kind_rule_files_are_the_kinds_off_the_grid_each_with_its_functions():
    from imagenet_cog.probes.kinds import KINDS

    declared = {kind.off_grid.rules for kind in KINDS.values() if kind.off_grid}
    assert {str(path.relative_to(RULES)) for path in KIND_RULES.glob("*.smk")} == declared
    functions = {path.name for path in (KIND_RULES / "functions").glob("*.smk")}
    assert functions == {path.name for path in KIND_RULES.glob("*.smk")}


def test_every_command_a_rule_file_runs_lives_in_its_stage_package():
    from imagenet_cog.cli import COMMANDS

    misplaced = []
    for path in RULE_FILES:
        # a kind's rules run the commands of the stages it spans (its module names them)
        stages = PACKAGES - SHARED_PACKAGES if KIND_RULES in path.parents else {path.stem}
        for command in re.findall(r'python_command\("([a-z0-9-]+)"\)', path.read_text()):
            assert command in COMMANDS, f"{path.name} runs '{command}', which the cli does not know"
            if path.stem not in SHARED_RULE_FILES and package_of(COMMANDS[command].split(":")[0]) not in stages:
                misplaced.append(f"{path.name}: {command} -> {COMMANDS[command]}")
    assert not misplaced, misplaced


def test_every_cli_command_resolves_to_a_function():
    from imagenet_cog.cli import COMMANDS

    for command, target in COMMANDS.items():
        module_name, function_name = target.split(":")
        function = getattr(importlib.import_module(module_name), function_name, None)
        assert callable(function), f"{command}: {target} is not a function"


def test_no_import_loop_between_modules_or_packages():
    assert cycles(import_graph()) == []
    assert cycles(package_graph()) == []


def test_core_imports_no_stage():
    climbing = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if package_of(module) == "core"
        for target in targets
        if package_of(target) != "core"
    )
    assert not climbing, climbing


def test_packages_import_each_other_as_the_architecture_page_draws_it():
    actual = {source: targets for source, targets in package_graph().items() if targets}
    assert actual == documented_imports(), (
        "the imports between packages changed: update the ```text imports block of docs/architecture.md "
        f"(or the code); actual: {dict(sorted(actual.items()))}"
    )


def test_names_are_imported_from_the_module_that_defines_them():
    known = modules()
    defined = {}
    for name, path in known.items():
        names = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(name.id for target in node.targets for name in ast.walk(target) if isinstance(name, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
        defined[name] = names
    sources = {name: path for name, path in known.items()}
    for folder in ("tests", "benchmarks", "scripts"):
        for path in sorted((REPOSITORY / folder).glob("*.py")):
            sources[f"{folder}/{path.name}"] = path
    borrowed = []
    for name, path in sources.items():
        for module, imported_name in imported(name if name in known else "imagenet_cog.x", path, known):
            if imported_name is not None and module in defined and imported_name not in defined[module]:
                borrowed.append(f"{name}: {imported_name} from {module}")
    assert not borrowed, borrowed


def test_the_schema_allows_the_datasets_the_naming_module_names():
    from imagenet_cog.core.naming import DEFAULT_DATASET

    schema = yaml.safe_load((REPOSITORY / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert schema["properties"]["datasets"]["items"]["pattern"] == f"^({DEFAULT_DATASET})$"


# the names core/naming.py (and the probe kinds' modules) form: compared, defaulted or
# assigned as literals elsewhere, a new kind or dataset would have to be found by hand
FORMED_NAMES = {"in21k", "in1k", "in1k_blurred", "pool", "linear", "knn", "mlp", "mlp_noact", "pca", "zeroshot",
                "open-set"}
FORMED_PREFIXES = {"l", "gap", "pca-", "random-", "balanced-"}
NAME_MODULES = {PACKAGE / "core" / "naming.py", *(PACKAGE / "probes" / "kinds").glob("*.py")}


def named_literals(tree: ast.AST, names: set[str] = FORMED_NAMES, prefixes: set[str] = FORMED_PREFIXES) -> list[ast.AST]:
    """String literals of one of ``names`` where code decides on them (comparisons, argument
    defaults, assigned constants, returned values, dict keys and values) and f-strings that
    form a name's prefix."""
    candidates, formed = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            candidates += [node.left, *node.comparators]
        elif isinstance(node, ast.arguments):
            candidates += [*node.defaults, *node.kw_defaults]
        elif isinstance(node, (ast.Assign, ast.Return)) and node.value is not None:
            candidates.append(node.value)
        elif isinstance(node, ast.IfExp):
            candidates += [node.body, node.orelse]
        elif isinstance(node, ast.Dict):
            candidates += [key for key in node.keys if key is not None] + node.values
        elif isinstance(node, ast.JoinedStr) and len(node.values) > 1:
            first = node.values[0]
            formed += [node] if isinstance(first, ast.Constant) and first.value in prefixes else []
    parts = [part for node in candidates
             for part in (node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node])]
    return formed + [part for part in parts if isinstance(part, ast.Constant) and part.value in names]


def test_dataset_and_kind_names_are_formed_by_the_naming_module_only():
    literals = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}"
        for path in sorted(PACKAGE.rglob("*.py")) if path not in NAME_MODULES
        for node in named_literals(ast.parse(path.read_text()))
    ]
    assert literals == [], "use core/naming.py's constants and functions (or the probe kinds' registry)"


def test_image_layout_names_come_from_the_layouts_table_only():
    """A layout is decided on by its constant or its entry's flags (core/image_layouts.py), so
    that a new layout is found where the table is read, not by searching for its name."""
    from imagenet_cog.core.image_layouts import LAYOUT_NAMES

    # spelt like a layout, meaning something else: the needed-synsets table's column of tar names
    homonyms = {("splits/preflight.py", "tar")}
    literals = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}"
        for path in sorted(PACKAGE.rglob("*.py")) if path.name != "image_layouts.py"
        for node in named_literals(ast.parse(path.read_text()), set(LAYOUT_NAMES), set())
        if (str(path.relative_to(PACKAGE)), node.value) not in homonyms
    ]
    assert literals == [], "use core/image_layouts.py's constants (FOLDERS, TARS, ...) or its entries' flags"


def test_the_rule_files_take_dataset_and_kind_names_from_the_naming_module():
    names = "|".join(sorted(FORMED_NAMES))
    # compared, tested for membership, returned after else, or passed as a call's first argument
    literal = re.compile(rf'(?:==|!=|\belse)\s*"(?:{names})"|"(?:{names})"\s*(?:==|!=|(?:not\s+)?in\b)'
                         rf'|\(\s*"(?:{names})"\s*[,)]')
    found = [
        f"{path.relative_to(REPOSITORY)}:{number}: {line.strip()}"
        for path in RULE_FILES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert found == [], "use naming's constants (naming.IN1K, naming.PCA, ...)"


# Where a probe kind besides linear is named by its constant (or its result names' functions):
# its module in probes/kinds/, the naming module, and the code that is the kind itself: the
# k-NN's command, the probe command's projection onto principal components, and the pca kinds'
# paper table and figure (CoG preprint, Tab. 5, Fig. 8: top-1 against d). Rules, the plan, the
# result tables' sets and the report reach every kind through the registry.
KIND_CONSTANTS = {
    "KNN": {"probes/knn_probe.py"},
    "MLP": set(),
    "MLP_NOACT": set(),
    "MLP_KINDS": set(),
    "PCA": {"probes/probe.py", "probes/search.py", "results/figures.py", "core/layout.py"},
    "PCA_PREFIX": {"results/figures.py"},
    "pca_kind": {"probes/search.py", "results/tables.py"},
    "pca_dim": {"probes/probe.py", "probes/search.py", "results/tables.py", "results/figures.py"},
    # zero-shot's own commands, paths and rules (it has no grid: its jobs and tables are its own)
    "ZEROSHOT": {"probes/zeroshot_probe.py", "results/zeroshot.py", "core/layout.py",
                 "workflow/rules/kinds/functions/zeroshot.smk"},
}


def code_names(path: Path) -> set[str]:
    """The names a Python file's code uses (bare, as attributes, imported); a rule file's
    ``naming.<NAME>``."""
    if path.suffix == ".smk":
        return set(re.findall(r"\bnaming\.(\w+)", path.read_text()))
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.name for alias in node.names)
    return names


def test_a_probe_kind_is_named_only_by_its_module_and_its_own_code():
    from imagenet_cog.probes.kinds import KINDS

    named = defaultdict(set)
    for path in [*sorted(PACKAGE.rglob("*.py")), *RULE_FILES]:
        relative = str(path.relative_to(PACKAGE if path.suffix == ".py" else REPOSITORY))
        if relative.startswith("probes/kinds/") or path.name == "naming.py":
            continue
        for constant in code_names(path) & set(KIND_CONSTANTS):
            named[constant].add(relative)
    assert {constant: found - KIND_CONSTANTS[constant] for constant, found in named.items()
            if found - KIND_CONSTANTS[constant]} == {}, "reach the kind through probes.kinds.KINDS and its module's fields"
    assert set(KINDS) - {"linear"} <= {name.lower() for name in KIND_CONSTANTS}


def backend_choices(tree: ast.AST) -> list[ast.Call]:
    """Calls that pick matplotlib's backend: ``matplotlib.use(...)``, ``pyplot.switch_backend(...)``."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and (node.func.attr == "switch_backend" or (node.func.attr == "use" and getattr(node.func.value, "id", "") in {"matplotlib", "mpl"}))
    ]


def test_only_the_plots_module_chooses_matplotlibs_backend():
    choosers = sorted(
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if backend_choices(ast.parse(path.read_text()))
    )
    assert choosers == ["core/plots.py"], f"matplotlib's backend is chosen in {choosers}; only core/plots.py may"


def test_every_command_takes_the_shared_device_option():
    """One --device: core/command_line.py's (auto, cpu or cuda, its help saying what the command
    does there); no command defines its own."""
    shared = PACKAGE / "core" / "command_line.py"
    own = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                 if path != shared and '"--device"' in path.read_text())
    assert own == [], f"{own} define their own --device; use add_device_option (core/command_line.py)"


# "issue #33", "(#56)": a tracker reference a reader of the code cannot open
ISSUE_REFERENCE = re.compile(r"\bissues? #?\d+|\(#\d+[);]|#\d+\)")


def test_the_workflows_code_rules_and_schema_cite_no_issue():
    files = [REPOSITORY / "Snakefile", REPOSITORY / "config.yaml", *sorted((REPOSITORY / "workflow").rglob("*"))]
    cited = [
        f"{path.relative_to(REPOSITORY)}:{number}: {line.strip()}"
        for path in files
        if path.is_file() and path.suffix in {"", ".py", ".smk", ".yaml", ".rst", ".json"}
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if ISSUE_REFERENCE.search(line)
    ]
    assert not cited, "the code should say what it does, not which issue added it:\n" + "\n".join(cited)


# Snakemake's command line in a new interpreter, then whether it imported torch.
SNAKEMAKE_THEN_TORCH_IMPORTED = """
import sys
from snakemake.cli import main
try:
    main(sys.argv[1:])
except SystemExit as end:
    print("torch imported:", "torch" in sys.modules)
    raise
"""


def test_reading_the_snakefile_imports_no_torch(tmp_path):
    """The default captioner (a pretrained open_clip tag, whose options resolve through open_clip)
    and a safetensors checkpoint configured, captions off: listing the rules reads the whole
    Snakefile, model checks included, and must leave torch unimported."""
    from safetensors.torch import save_file

    from imagenet_cog.models.registry import ModelSpec, build_model

    workdir = copy_workflow(tmp_path / "copy")
    checkpoint = tmp_path / "saved.safetensors"
    save_file(build_model(ModelSpec("saved", "demo_cnn", "random:3")).network.state_dict(), checkpoint)
    default_captioner = {"name": "coca", "arch": "open_clip/coca_ViT-L-14", "weights": "mscoco_finetuned_laion2b_s13b_b90k"}
    overlay = {"analyses": {"captions": {"enabled": False, "captioner": default_captioner}},
               "models": {"saved_cnn": {"arch": "demo_cnn", "weights": str(checkpoint)}}}
    (workdir / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    result = subprocess.run([sys.executable, "-c", SNAKEMAKE_THEN_TORCH_IMPORTED, "--list-rules", "--configfile", "overlay.yaml"],
                            cwd=workdir, capture_output=True, text=True, timeout=300, env=snakemake_environment())
    assert result.returncode == 0 and "probe_resident" in result.stdout, result.stdout[-2000:] + result.stderr[-3000:]
    assert "torch imported: False" in result.stdout, result.stdout[-2000:]
