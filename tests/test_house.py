"""The house's own rules, read from the source (no import of aayn): no import circle among aayn's modules (an import
inside a function counts: it closes the loop at run time), no floor importing one above it, no module importing
another's private name, no function over 80 lines, the model file and the README within their sizes, every link
of the README and the docs reaching its file and heading."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "aayn"
LONGEST_FUNCTION, MODEL_FILE_LINES, README_LINES = 80, 650, 220


def modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict) -> set[str]:
    """The aayn modules that `name` imports anywhere in its text (a `from . import x` names module x)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in known else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return (found & set(known)) - {name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on, stack, groups, counter = {}, {}, set(), [], [], [0]

    def visit(start):
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_circles_are_found():
    """The finder itself, on a graph with one circle of three and a branch off it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert graph["aayn.serve.app"] >= {"aayn.serve.hub_api", "aayn.serve.libretranslate"}  # the reader reads
    assert circles(graph) == []


# the floors, lowest first: a package imports none above it (the model below all; the formats, their engines and
# the engine interface, below the path a text takes; the path below the server and the command line)
FLOORS = [("aayn.model",), ("aayn.data",), ("aayn.formats",), ("aayn.translation",), ("aayn.serve", "aayn.cli")]
# the one reach up: generate(cuda_graphs=True) takes the graphs from the installed package, never from a saved folder
REACHES_UP = {("aayn.model.decoding_aayn", "aayn.formats.aayn.cuda_graphs")}


def test_no_floor_imports_one_above_it():
    known = modules()
    found = []
    for level, packages in enumerate(FLOORS):
        above = tuple(package for floor in FLOORS[level + 1 :] for package in floor)
        for name, path in known.items():
            if name.startswith(packages):
                found += [(name, up) for up in imported(name, path, known) if up.startswith(above)]
    assert set(found) == REACHES_UP


def test_no_module_imports_another_modules_private_name():
    """A name led by `_` is its module's own: one another module needs is public (catches `from .prepare import
    _record`). `__future__`'s and dunder names are not private."""
    found = [
        f"{path.relative_to(SRC.parent)}:{node.lineno} {alias.name}"
        for path in SRC.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module != "__future__"
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert found == []


def test_no_function_over_80_lines():
    long = [
        f"{path.relative_to(SRC.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in SRC.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION
    ]
    assert long == []


def test_the_model_file_and_the_readme_within_their_sizes():
    assert len((SRC / "model" / "modeling_aayn.py").read_text(encoding="utf-8").splitlines()) <= MODEL_FILE_LINES
    assert len((SRC.parents[1] / "README.md").read_text(encoding="utf-8").splitlines()) <= README_LINES


def test_the_model_file_imports_every_file_that_travels_with_it():
    """transformers 4.57 copies into its modules cache only the remote model file's direct relative imports, then
    follows their imports: a `model/*_aayn.py` imported by another file alone is missing there (a folder saved on
    5.x fails to load on 4.57 without aayn)."""
    modeling = SRC / "model" / "modeling_aayn.py"
    imported = {node.module for node in ast.walk(ast.parse(modeling.read_text(encoding="utf-8")))
                if isinstance(node, ast.ImportFrom) and node.level == 1}  # fmt: skip
    travelling = {path.stem for path in (SRC / "model").glob("*_aayn.py")} - {modeling.stem}
    tokenizers = {stem for stem in travelling if stem.startswith("tokenization_")}  # remote code of their own
    assert travelling - tokenizers - imported == set()


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, characters other than letters, digits,
    spaces, hyphens and underscores dropped, spaces made hyphens; a repeated one gets -1, -2, ..."""
    anchors, seen = set(), {}
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        anchor = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        anchors.add(f"{anchor}-{seen[anchor]}" if anchor in seen else anchor)
        seen[anchor] = seen.get(anchor, 0) + 1
    return anchors


def test_every_link_of_the_readme_and_the_docs_reaches_its_file_and_heading():
    root = SRC.parents[1]
    broken = []
    for page in [root / "README.md", root / "tests" / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", link):
                continue  # another site's
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(root)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in heading_anchors(target.read_text("utf-8")):
                broken.append(f"{page.relative_to(root)}: {link} (no such heading)")
    assert broken == []


def test_no_branch_on_a_format_outside_its_room():
    """A format's name compared, or its tokenizer class tested, only inside its own room (`aayn/formats/<name>/`):
    elsewhere the code asks the format (a `Format` attribute or method), so that adding one touches nothing else."""
    names = {path.name for path in (SRC / "formats").iterdir() if (path / "__init__.py").is_file()}
    assert {"aayn", "ctranslate2", "onnx", "argos", "fairseq"} <= names
    names.discard("aayn")  # the package's own name is everywhere
    found = []
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).parts[0] == "model":
            continue  # the model's own files know layouts and rules ("marian" sinusoids), never formats
        room = path.relative_to(SRC).parts[1] if path.relative_to(SRC).parts[0] == "formats" else None
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                values = [node.left, *node.comparators]
                if "normalization" in ast.unparse(node):
                    continue  # "fairseq" is a length normalization too (fairseq's |Y|^alpha), not the format
                named = {v.value for v in values if isinstance(v, ast.Constant) and v.value in names}
                found += [f"{path.relative_to(SRC)}:{node.lineno} == {name!r}" for name in named if name != room]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                text = ast.unparse(node)
                if "Fairseq" in text and room != "fairseq":
                    found.append(f"{path.relative_to(SRC)}:{node.lineno} {text}")
    assert found == []


def test_the_top_floor_holds_few_loose_modules():
    """`aayn/` holds its rooms (packages) and a few modules every room uses; a new module goes into a room."""
    loose = sorted(path.name for path in SRC.glob("*.py"))
    assert len(loose) <= 16, loose


def test_the_model_has_no_second_calling_convention_nor_reads_torchs_private_module_state():
    """The model room reads like §3: no function of it takes a `direct` switch, and neither the layers nor the
    search's steps read the module call machinery's private state (hooks, compiled calls); `ops_aayn.plain_linear`
    still reads the output layer's hooks, so that the fused loss and the decoding layout never bypass a hook or an
    adapter. Mutation caught: a `direct=False` parameter put back on a layer's `forward`, or `plain_steps` reading
    `module._forward_hooks` again."""
    private = {"_forward_hooks", "_forward_pre_hooks", "_compiled_call_impl", "_has_any_global_hook"}
    for path in sorted((SRC / "model").glob("*.py")):
        if path.name == "ops_aayn.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.Lambda)):
                names = {arg.arg for arg in [*node.args.args, *node.args.kwonlyargs]}
                assert "direct" not in names, f"{path.name}:{node.lineno} takes `direct`"
            if isinstance(node, ast.Attribute):
                assert node.attr not in private, f"{path.name}:{node.lineno} reads {node.attr}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert node.value not in private, f"{path.name}:{node.lineno} reads {node.value}"
