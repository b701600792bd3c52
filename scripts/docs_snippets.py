#!/usr/bin/env python3
"""The snippet runner behind scripts/test-docs (see there for the convention).

    docs_snippets.py plan FILE...   check the markers of every fenced block; print what the run
                                    needs (JSON: languages to run, tools); exit 1 on a bad marker
    docs_snippets.py run [options] FILE...
                                    check the markers, then run or syntax-check every block in
                                    order against the dev node that scripts/test-docs started

Standard library only (Python 3.9+; `toml` blocks are parsed when tomllib exists, 3.11+).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(\S+?)\s*-->\s*$")
FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*([^\s`]*)")
KINDS = ("run", "syntax", "skip")
RUN_LANGS = ("sh", "python", "go", "ts", "java", "rust")
SYNTAX_LANGS = RUN_LANGS + ("toml", "json", "xml", "text")
GO_MODULE = "github.com/rebound-dev/rebound/client-sdk/go"
OUTPUT_TAIL = 60


@dataclass
class Block:
    path: str
    line: int  # of the opening fence, 1-based
    kind: str | None
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def parse(path: str) -> tuple[list[Block], list[str]]:
    """Every fenced block of a Markdown file with the marker on the line before its fence."""
    blocks: list[Block] = []
    errors: list[str] = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if m.group(1) not in KINDS:
                errors.append(
                    f"{path}:{i + 1}: unknown marker `snippet: {m.group(1)}` (run, syntax or skip)"
                )
            if not FENCE.match(nxt):
                errors.append(
                    f"{path}:{i + 1}: a snippet marker must be the line right before "
                    "a fence (no blank line between)"
                )
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            i += 1
            continue
        indent, fence, lang = len(f.group(1)), f.group(2), f.group(3).lower()
        start = i
        close = re.compile(r"^ *" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            line = lines[i]
            strip = min(indent, len(line) - len(line.lstrip(" ")))
            body.append(line[strip:])
            i += 1
        if i >= len(lines):
            errors.append(f"{path}:{start + 1}: the fence is never closed")
        i += 1
        prev = MARKER.match(lines[start - 1]) if start > 0 else None
        kind = prev.group(1) if prev and prev.group(1) in KINDS else None
        b = Block(path, start + 1, kind, lang, "\n".join(body) + "\n")
        blocks.append(b)
        label = f"```{lang}" if lang else "a fenced block without a language"
        if prev is None:
            errors.append(
                f"{b.where}: {label} has no <!-- snippet: run|syntax|skip --> marker "
                "on the line before its fence"
            )
        elif kind == "run" and lang not in RUN_LANGS:
            errors.append(
                f"{b.where}: {label} cannot run (run: {', '.join(RUN_LANGS)}); "
                "mark it syntax or skip"
            )
        elif kind == "syntax" and lang not in SYNTAX_LANGS:
            errors.append(
                f"{b.where}: {label} has no syntax check (syntax: "
                f"{', '.join(SYNTAX_LANGS)}); mark it skip, or use sh for shell"
            )
    return blocks, errors


def parse_all(files: list[str]) -> tuple[list[tuple[str, list[Block]]], list[str]]:
    out, errors = [], []
    for f in files:
        blocks, errs = parse(f)
        out.append((f, blocks))
        errors += errs
    return out, errors


def cmd_plan(files: list[str]) -> int:
    parsed, errors = parse_all(files)
    for e in errors:
        print(e, file=sys.stderr)
    run_langs = sorted({b.lang for _, bs in parsed for b in bs if b.kind == "run"})
    syntax_langs = sorted({b.lang for _, bs in parsed for b in bs if b.kind == "syntax"})
    run_text = "\n".join(b.code for _, bs in parsed for b in bs if b.kind == "run")
    print(
        json.dumps(
            {
                "run": run_langs,
                "syntax": syntax_langs,
                "grpcurl": "grpcurl" in run_text,
                "pip": bool(re.search(r"\bpip3?\b", run_text)),
            }
        )
    )
    return 1 if errors else 0


# ---- rewriting a snippet for the test's node ------------------------------------------------


@dataclass
class Ctx:
    repo: Path
    bin_dir: Path
    grpc_port: int
    http_port: int
    scratch: Path
    venv: Path
    cache: Path
    tsc: str | None
    timeout: float
    verbose: bool
    started: float = field(default_factory=time.time)
    env: dict[str, str] = field(default_factory=dict)
    rust_externs: list[str] | None = None
    java_cp: str | None = None
    groups: list[int] = field(default_factory=list)


DEV_NODE = re.compile(r"(^|[\s/;&|(])rebound-server(\s+[^#\n]*?)?\s(--\s+)?dev(\s|$)")
CARGO_RELEASE = re.compile(
    r"^(\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*cargo\s+(?:build|run|install)\b.*?)"
    r"\s(?:--release|-r)\b"
)


def rewrite(code: str, lang: str, ctx: Ctx) -> str:
    for host in ("127.0.0.1", "localhost"):
        code = code.replace(f"{host}:50051", f"{host}:{ctx.grpc_port}")
        code = code.replace(f"{host}:9464", f"{host}:{ctx.http_port}")
    if lang != "sh":
        return code
    if ctx.bin_dir.name != "release":
        code = re.sub(r"(?<![\w.-])(\./)?target/release/", str(ctx.bin_dir) + "/", code)
    out: list[str] = []
    logical: list[str] = []
    for line in code.splitlines():
        logical.append(line)
        if line.rstrip().endswith("\\"):
            continue
        joined = " ".join(part.rstrip().rstrip("\\") for part in logical)
        if DEV_NODE.search(joined) and "--help" not in joined:
            out.append(
                ": # the runner's dev node is already up: " + joined.strip()[:120].replace("\\", "")
            )
            out += [""] * (len(logical) - 1)
        else:
            if ctx.bin_dir.name != "release":
                # A release build is not what the runner runs: build the debug one instead.
                logical = [CARGO_RELEASE.sub(r"\1", part) for part in logical]
            out += logical
        logical = []
    out += logical
    return "\n".join(out) + "\n"


# ---- running ------------------------------------------------------------------------------------


class Failed(Exception):
    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


def tail(text: str, n: int = OUTPUT_TAIL) -> str:
    lines = text.rstrip("\n").splitlines()
    if len(lines) > n:
        lines = [f"... ({len(lines) - n} lines before)"] + lines[-n:]
    return "\n".join(lines)


def run_cmd(
    ctx: Ctx,
    argv: list[str],
    cwd: Path,
    what: str,
    log: Path,
    env: dict[str, str] | None = None,
    keep_group: bool = False,
) -> str:
    """Runs argv in its own process group with the snippet timeout; its output goes to log
    (so that a background process it leaves does not hold a pipe open). Raises Failed."""
    with open(log, "ab") as out:
        shown = " ".join(a if len(a) <= 160 else a[:60] + " ... " + a[-40:] for a in argv)
        out.write(f"$ {shown}   (in {cwd})\n".encode())
        out.flush()
        p = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env or ctx.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = p.wait(timeout=ctx.timeout)
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                    p.wait(timeout=3)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            p.wait()
            kill_group(p.pid)
            raise Failed(
                f"{what}: timed out after {ctx.timeout:.0f} s", log.read_text(errors="replace")
            ) from None
    if keep_group:
        ctx.groups.append(p.pid)
    else:
        kill_group(p.pid)
    text = log.read_text(errors="replace")
    if rc != 0:
        raise Failed(f"{what}: exit status {rc}", text)
    return text


def kill_group(pgid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        for _ in range(30):
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def copy_sdks(ctx: Ctx, dest: Path) -> None:
    """The working tree's client-sdk/ and proto/ (tracked and untracked files, not ignored
    ones such as node_modules/ or target/): the checkout a newcomer installs from."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z", "client-sdk", "proto"],
            cwd=ctx.repo,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        src = ctx.repo / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


class FileRun:
    """The blocks of one Markdown file, in order, sharing a project directory."""

    def __init__(self, ctx: Ctx, path: str) -> None:
        self.ctx = ctx
        self.path = path
        slug = re.sub(r"[^A-Za-z0-9]+", "-", path).strip("-")
        self.project = ctx.scratch / slug
        self.project.mkdir(parents=True, exist_ok=True)
        copy_sdks(ctx, self.project)
        self.logs = ctx.scratch / "logs"
        self.logs.mkdir(exist_ok=True)
        # README blocks run from the root of the checkout, as a reader types them; other pages'
        # sh blocks run in the project directory, which holds a copy of client-sdk/ and proto/.
        at_root = Path(path).resolve().parent == ctx.repo
        self.sh_cwd = ctx.repo if at_root else self.project
        self.setup_log = self.logs / f"{slug}-setup.log"

    def log_for(self, b: Block) -> Path:
        return self.logs / f"{Path(b.path).stem}-L{b.line}-{b.lang}.log"

    def file_for(self, b: Block, suffix: str) -> Path:
        d = self.project / ".snippets"
        d.mkdir(parents=True, exist_ok=True)
        return d / f"snippet-{b.lang}-L{b.line}{suffix}"

    # -- setup shared by the blocks of a language, done the way the page says when it did not --

    def setup(self, argv: list[str], what: str) -> None:
        run_cmd(self.ctx, argv, self.project, what, self.setup_log)

    def python(self) -> Path:
        py = self.ctx.venv / "bin" / "python"
        probe = subprocess.run(
            [
                str(py),
                "-c",
                "import os, rebound_client; "
                "print(os.path.getmtime(os.path.dirname(rebound_client.__file__)))",
            ],
            capture_output=True,
            text=True,
            env=self.ctx.env,
        )
        fresh = probe.returncode == 0 and float(probe.stdout.strip()) >= self.ctx.started
        if not fresh:  # not installed by this run's blocks: install the copy, as the page says
            self.setup(
                [str(self.ctx.venv / "bin" / "pip"), "install", "-q", "./client-sdk/python"],
                "pip install ./client-sdk/python",
            )
        return py

    def go_module(self) -> None:
        if (self.project / "go.mod").exists():
            return
        self.setup(["go", "mod", "init", "example.com/snippets"], "go mod init")
        self.setup(
            [
                "go",
                "mod",
                "edit",
                f"-require={GO_MODULE}@v0.0.0",
                f"-replace={GO_MODULE}=./client-sdk/go",
            ],
            "go mod edit -replace",
        )

    def ts_package(self) -> None:
        if (self.project / "node_modules" / "@rebound" / "client").exists():
            return
        self.setup(
            ["npm", "install", "--no-audit", "--no-fund", "./client-sdk/typescript"],
            "npm install ./client-sdk/typescript",
        )

    def java_classpath(self) -> str:
        jar = (
            Path.home()
            / ".m2"
            / "repository"
            / "dev"
            / "rebound"
            / "rebound-client"
            / "0.1.0"
            / "rebound-client-0.1.0.jar"
        )
        if not jar.exists() or jar.stat().st_mtime < self.ctx.started:
            self.setup(
                ["mvn", "-q", "-B", "-f", "client-sdk/java", "install", "-DskipTests"],
                "mvn -q -f client-sdk/java install -DskipTests",
            )
        if self.ctx.java_cp is None:
            # The class path of a project that depends on the SDK, kept while its pom is unchanged.
            pom = (self.ctx.repo / "client-sdk" / "java" / "pom.xml").read_bytes()
            d = self.ctx.cache / "docs-java"
            d.mkdir(parents=True, exist_ok=True)
            cp_file = d / f"classpath-{hashlib.sha256(pom).hexdigest()[:16]}.txt"
            if not cp_file.exists():
                (d / "pom.xml").write_text(CONSUMER_POM)
                tmp = cp_file.with_suffix(".tmp")
                run_cmd(
                    self.ctx,
                    [
                        "mvn",
                        "-q",
                        "-B",
                        "-f",
                        str(d / "pom.xml"),
                        "dependency:build-classpath",
                        f"-Dmdep.outputFile={tmp}",
                    ],
                    d,
                    "mvn dependency:build-classpath",
                    self.setup_log,
                )
                tmp.rename(cp_file)
            self.ctx.java_cp = cp_file.read_text().strip()
        return self.ctx.java_cp

    def rust_externs(self) -> list[str]:
        if self.ctx.rust_externs is None:
            # The crate as the workspace builds it (what `cargo test --all-targets` leaves fresh):
            # the snippet is compiled against those rlibs, like a doc test. --workspace, not
            # -p rebound-client: cargo unifies features over the packages selected, and the
            # client alone leaves tokio without the features the rest of the workspace turns on
            # ("process"), so that `-p` rebuilt tokio and all that depends on it (~170 s on a
            # fresh CI machine) instead of reusing the test build. Only the examples (rebound-
            # client's) and the libraries they need are built; --examples also selects the
            # dev-dependencies' features, as `cargo test --all-targets` does.
            log = self.logs / "cargo-build-rebound-client.log"
            proc = subprocess.run(
                [
                    "cargo",
                    "build",
                    "--workspace",
                    "--examples",
                    "--message-format=json-render-diagnostics",
                ],
                cwd=self.ctx.repo,
                env=self.ctx.env,
                capture_output=True,
                text=True,
                timeout=max(self.ctx.timeout, 900),
            )
            log.write_text(proc.stderr)
            if proc.returncode != 0:
                raise Failed("cargo build --workspace --examples failed", proc.stderr)
            found: dict[str, str] = {}
            for line in proc.stdout.splitlines():
                msg = json.loads(line)
                if msg.get("reason") != "compiler-artifact":
                    continue
                name = msg["target"]["name"]
                if name in ("rebound_client", "tokio"):
                    rlibs = [f for f in msg["filenames"] if f.endswith(".rlib")]
                    if rlibs:
                        found[name] = rlibs[0]
            if set(found) != {"rebound_client", "tokio"}:
                raise Failed(
                    f"cargo build --workspace --examples: no rlib for "
                    f"{sorted({'rebound_client', 'tokio'} - set(found))}"
                )
            deps = str(Path(found["tokio"]).parent)
            externs = ["-L", f"dependency={deps}"]
            for name, rlib in sorted(found.items()):
                externs += ["--extern", f"{name}={rlib}"]
            self.ctx.rust_externs = externs
        return self.ctx.rust_externs

    # -- one block --

    def run_block(self, b: Block) -> None:
        code = rewrite(b.code, b.lang, self.ctx)
        log = self.log_for(b)
        log.write_text("")
        what = f"{b.lang} snippet"
        if b.lang == "sh":
            f = self.file_for(b, ".sh")
            f.write_text("set -euo pipefail\n" + code)
            run_cmd(self.ctx, ["bash", str(f)], self.sh_cwd, what, log, keep_group=True)
        elif b.lang == "python":
            py = self.python()
            f = self.file_for(b, ".py")
            f.write_text(code)
            run_cmd(self.ctx, [str(py), str(f)], self.project, what, log)
        elif b.lang == "go":
            self.go_module()
            d = self.project / f"snippet-go-L{b.line}"
            d.mkdir(exist_ok=True)
            (d / "main.go").write_text(code)
            run_cmd(self.ctx, ["go", "mod", "tidy"], self.project, "go mod tidy", log)
            run_cmd(self.ctx, ["go", "run", f"./{d.name}"], self.project, what, log)
        elif b.lang == "ts":
            if not self.ctx.tsc:
                raise Failed("no TypeScript compiler (scripts/sdk-env typescript)")
            self.ts_package()
            f = self.project / f"snippet-ts-L{b.line}.mts"
            f.write_text(code)
            out = self.project / ".ts-out"
            types = Path(self.ctx.tsc).parent.parent / "@types"
            run_cmd(
                self.ctx,
                [
                    self.ctx.tsc,
                    "--strict",
                    "--target",
                    "es2022",
                    "--module",
                    "nodenext",
                    "--moduleResolution",
                    "nodenext",
                    "--skipLibCheck",
                    "--typeRoots",
                    str(types),
                    "--types",
                    "node",
                    "--outDir",
                    str(out),
                    str(f),
                ],
                self.project,
                "tsc",
                log,
            )
            run_cmd(
                self.ctx, ["node", str(out / f"snippet-ts-L{b.line}.mjs")], self.project, what, log
            )
        elif b.lang == "java":
            cp = self.java_classpath()
            m = re.search(r"\bpublic\s+(?:final\s+)?class\s+(\w+)", code)
            if not m:
                raise Failed("a java snippet must be a whole program with a public class")
            d = self.project / f"snippet-java-L{b.line}"
            (d / "classes").mkdir(parents=True, exist_ok=True)
            f = d / f"{m.group(1)}.java"
            f.write_text(code)
            run_cmd(
                self.ctx,
                ["javac", "-d", str(d / "classes"), "-cp", cp, str(f)],
                self.project,
                "javac",
                log,
            )
            run_cmd(
                self.ctx,
                ["java", "-cp", f"{d / 'classes'}{os.pathsep}{cp}", m.group(1)],
                self.project,
                what,
                log,
            )
        elif b.lang == "rust":
            externs = self.rust_externs()
            f = self.file_for(b, ".rs")
            f.write_text(code)
            exe = f.with_suffix("")
            run_cmd(
                self.ctx,
                ["rustc", "--edition", "2021", "-o", str(exe), *externs, str(f)],
                self.project,
                "rustc",
                log,
            )
            run_cmd(self.ctx, [str(exe)], self.project, what, log)
        else:  # parse() refuses these
            raise Failed(f"cannot run {b.lang}")

    def check_block(self, b: Block) -> None:
        """A syntax check only; raises Failed."""
        code = b.code
        log = self.log_for(b)
        log.write_text("")
        if not code.strip():
            raise Failed("empty block")
        if b.lang == "sh":
            f = self.file_for(b, ".sh")
            f.write_text(code)
            run_cmd(self.ctx, ["bash", "-n", str(f)], self.project, "bash -n", log)
        elif b.lang == "python":
            try:
                compile(code, b.where, "exec")
            except SyntaxError as e:
                raise Failed(f"python: {e}") from None
        elif b.lang == "go":
            p = subprocess.run(["gofmt", "-e"], input=code, capture_output=True, text=True)
            if p.returncode != 0:
                raise Failed("gofmt -e", p.stderr)
        elif b.lang == "ts":
            ts_lib = Path(self.ctx.tsc).parent.parent / "typescript" if self.ctx.tsc else None
            if ts_lib is None or not ts_lib.exists():
                return  # no compiler at hand: non-empty is all that is checked
            p = subprocess.run(
                ["node", "-e", TS_SYNTAX, str(ts_lib)], input=code, capture_output=True, text=True
            )
            if p.returncode != 0:
                raise Failed("typescript syntax", p.stdout + p.stderr)
        elif b.lang == "java":
            problem = unbalanced(code)
            if problem:
                raise Failed(f"java: {problem}")
        elif b.lang == "rust":
            if shutil.which("rustfmt") is None:
                return
            for src in (code, "fn __snippet() {\n" + code + "\n}\n"):
                p = subprocess.run(
                    ["rustfmt", "--edition", "2021", "--emit", "stdout"],
                    input=src,
                    capture_output=True,
                    text=True,
                )
                if p.returncode == 0:
                    return
            raise Failed("rustfmt could not parse it", p.stderr)
        elif b.lang == "toml":
            try:
                import tomllib
            except ImportError:
                return
            try:
                tomllib.loads(code)
            except tomllib.TOMLDecodeError as e:
                raise Failed(f"toml: {e}") from None
        elif b.lang == "json":
            try:
                json.loads(code)
            except ValueError as e:
                raise Failed(f"json: {e}") from None
        elif b.lang == "xml":
            try:
                ET.fromstring("<snippet>" + re.sub(r"<\?xml[^>]*\?>", "", code) + "</snippet>")
            except ET.ParseError as e:
                raise Failed(f"xml: {e}") from None
        # text: non-empty is the check

    def finish(self) -> None:
        """Stops what the file's sh blocks left running in the background."""
        for pgid in self.ctx.groups:
            kill_group(pgid)
        self.ctx.groups.clear()


CONSUMER_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>docs.example</groupId>
  <artifactId>snippets</artifactId>
  <version>0</version>
  <dependencies>
    <dependency>
      <groupId>dev.rebound</groupId>
      <artifactId>rebound-client</artifactId>
      <version>0.1.0</version>
    </dependency>
  </dependencies>
</project>
"""

# Syntax errors only (no types): TypeScript's transpileModule reports the parser's diagnostics.
TS_SYNTAX = r"""
const ts = require(process.argv[1]);
const src = require("fs").readFileSync(0, "utf8");
const r = ts.transpileModule(src, { reportDiagnostics: true, fileName: "snippet.mts",
  compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } });
for (const d of r.diagnostics) {
  const { line, character } = d.file.getLineAndCharacterOfPosition(d.start);
  const text = ts.flattenDiagnosticMessageText(d.messageText, "\n");
  console.log(`${line + 1}:${character + 1}: ${text}`);
}
process.exit(r.diagnostics.length ? 1 : 0);
"""


def unbalanced(code: str) -> str | None:
    """Brackets that do not pair up, outside strings, chars and comments (Java's syntax check:
    a fragment cannot be compiled without the program around it)."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[tuple[str, int]] = []
    i, line, n = 0, 1, len(code)
    while i < n:
        c = code[i]
        if c == "\n":
            line += 1
        elif code.startswith("//", i):
            i = code.find("\n", i)
            if i < 0:
                break
            continue
        elif code.startswith("/*", i):
            end = code.find("*/", i + 2)
            if end < 0:
                return f"line {line}: unterminated comment"
            line += code.count("\n", i, end)
            i = end + 2
            continue
        elif code.startswith('"""', i):
            end = code.find('"""', i + 3)
            if end < 0:
                return f"line {line}: unterminated text block"
            line += code.count("\n", i, end)
            i = end + 3
            continue
        elif c in "\"'":
            j = i + 1
            while j < n and code[j] != c:
                if code[j] == "\\":
                    j += 1
                elif code[j] == "\n":
                    return f"line {line}: unterminated literal"
                j += 1
            i = j + 1
            continue
        elif c in "([{":
            stack.append((c, line))
        elif c in ")]}":
            if not stack or stack[-1][0] != pairs[c]:
                return f"line {line}: unmatched {c}"
            stack.pop()
        i += 1
    if stack:
        return f"line {stack[-1][1]}: unclosed {stack[-1][0]}"
    return None


def cmd_run(args: argparse.Namespace) -> int:
    parsed, errors = parse_all(args.files)
    if errors:
        for e in errors:
            print(e, file=sys.stderr)
        return 1
    scratch = Path(args.scratch)
    venv = Path(args.venv)
    bin_dir = Path(args.bin_dir)
    ctx = Ctx(
        repo=Path(args.repo).resolve(),
        bin_dir=bin_dir,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        scratch=scratch,
        venv=venv,
        cache=Path(args.cache),
        tsc=args.tsc or None,
        timeout=args.timeout,
        verbose=args.verbose,
    )
    path = os.pathsep.join(
        filter(
            None, [str(bin_dir), args.grpcurl_dir, str(venv / "bin"), os.environ.get("PATH", "")]
        )
    )
    ctx.env = dict(
        os.environ,
        PATH=path,
        VIRTUAL_ENV=str(venv),
        REBOUND_REPO=str(ctx.repo),
        REBOUND_ADDR=f"http://127.0.0.1:{args.grpc_port}",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        npm_config_fund="false",
        npm_config_audit="false",
        npm_config_update_notifier="false",
    )
    ctx.env.pop("PYTHONPATH", None)
    ctx.env.pop("PYTHONHOME", None)

    counts: dict[str, dict[str, int]] = {}
    failures: list[str] = []
    for path_, blocks in parsed:
        fr = FileRun(ctx, path_)
        print(
            f"== {path_}: {len(blocks)} blocks (sh blocks run in "
            f"{'the checkout' if fr.sh_cwd == ctx.repo else fr.project})",
            flush=True,
        )
        try:
            for b in blocks:
                c = counts.setdefault(
                    b.lang or "(none)", {"run": 0, "syntax": 0, "skip": 0, "failed": 0}
                )
                c[b.kind or "skip"] += 1
                if b.kind == "skip":
                    if args.verbose:
                        print(f"  skip  {b.where} {b.lang}")
                    continue
                t0 = time.monotonic()
                try:
                    if b.kind == "run":
                        fr.run_block(b)
                    else:
                        fr.check_block(b)
                except Failed as e:
                    c["failed"] += 1
                    failures.append(f"{b.where} ({b.lang}, {b.kind}): {e}")
                    print(
                        f"  FAIL  {b.where} {b.lang} {b.kind}: {e} ({time.monotonic() - t0:.1f} s)",
                        flush=True,
                    )
                    out = e.output or fr.log_for(b).read_text(errors="replace")
                    if out.strip():
                        print("  ---- output (log: " + str(fr.log_for(b)) + ")")
                        print("\n".join("  | " + ln for ln in tail(out).splitlines()))
                    if fr.setup_log.exists() and fr.setup_log.stat().st_size:
                        print(f"  (setup commands of this page: {fr.setup_log})")
                    continue
                print(
                    f"  ok    {b.where} {b.lang} {b.kind} ({time.monotonic() - t0:.1f} s)",
                    flush=True,
                )
                if args.verbose and b.kind == "run":
                    print(
                        "\n".join(
                            "  | " + ln
                            for ln in tail(fr.log_for(b).read_text(errors="replace")).splitlines()
                        )
                    )
        finally:
            fr.finish()

    print("== snippets by language")
    print(f"  {'language':<10} {'run':>4} {'syntax':>7} {'skip':>5} {'failed':>7}")
    total = {"run": 0, "syntax": 0, "skip": 0, "failed": 0}
    for lang in sorted(counts):
        c = counts[lang]
        for k in total:
            total[k] += c[k]
        print(f"  {lang:<10} {c['run']:>4} {c['syntax']:>7} {c['skip']:>5} {c['failed']:>7}")
    print(
        f"  {'all':<10} {total['run']:>4} {total['syntax']:>7} {total['skip']:>5} "
        f"{total['failed']:>7}"
    )
    if failures:
        print("test-docs: failed:", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan")
    p.add_argument("files", nargs="+")
    r = sub.add_parser("run")
    r.add_argument("--repo", required=True)
    r.add_argument("--bin-dir", required=True)
    r.add_argument("--grpc-port", type=int, required=True)
    r.add_argument("--http-port", type=int, required=True)
    r.add_argument("--scratch", required=True)
    r.add_argument("--venv", required=True)
    r.add_argument("--cache", required=True)
    r.add_argument("--grpcurl-dir", default="")
    r.add_argument("--tsc", default="")
    r.add_argument("--timeout", type=float, default=120)
    r.add_argument("--verbose", action="store_true")
    r.add_argument("files", nargs="+")
    args = ap.parse_args()
    if args.cmd == "plan":
        return cmd_plan(args.files)
    return cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
