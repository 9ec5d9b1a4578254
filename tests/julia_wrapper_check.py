"""Julia cannot be installed on the CI machine, so this checks bindings/julia/src/Tycho.jl
mechanically against abi/tycho/tycho.h:

- every function the header declares (TYCHO_API) has exactly one `@ccall libtycho.NAME(...)`
  wrapper, and every wrapper names a declared function;
- each wrapper has the C function's number of arguments, and each argument's and the return's
  Julia type is one that has the C type's size and meaning (table below);
- the Julia structs Progress, SessionOptions and EvaluateOptions have the fields of
  tycho_progress, tycho_session_options and tycho_evaluate_options, in order, with matching types (a layout mismatch would corrupt memory);
- the Julia DLPack structs have the fields of <dlpack/dlpack.h>'s, in order, with matching types;
- every `Tycho.name` the Julia page of the docs uses is defined in the module.

`--self-test` also checks that the checker catches a dropped argument, a wrong type, a missing
wrapper and a reordered struct field.

usage: python3 julia_wrapper_check.py HEADER TYCHO_JL [JULIA_DOC_MD [DLPACK_H]] [--self-test]
"""
import re
import sys
from typing import Dict, List, Set, Tuple

# C type (const and spacing normalised) -> the Julia types accepted for it.
C_TO_JULIA: Dict[str, Set[str]] = {
    "void": {"Cvoid"},
    "uint32_t": {"UInt32"},
    "int32_t": {"Int32", "Cint"},
    "int64_t": {"Int64"},
    "uint8_t": {"UInt8"},
    "double": {"Cdouble", "Float64"},
    "int": {"Cint", "Int32"},
    "tycho_status": {"Cint"},        # a C enum: int
    "tycho_save_mode": {"Cint"},
    "char*": {"Cstring", "Ptr{UInt8}", "Ptr{Cchar}"},
    "char*const*": {"Ptr{Ptr{UInt8}}", "Ptr{Cstring}", "Ptr{Ptr{Cchar}}"},
    "void*": {"Ptr{Cvoid}"},
    "tycho_session*": {"Ptr{Cvoid}"},
    "tycho_session**": {"Ptr{Ptr{Cvoid}}"},
    "DLManagedTensor**": {"Ptr{Ptr{DLManagedTensor}}"},
    "tycho_session_options*": {"Ptr{SessionOptions}"},
    "tycho_evaluate_options*": {"Ptr{EvaluateOptions}"},
    "char**": {"Ptr{Ptr{UInt8}}", "Ptr{Ptr{Cchar}}"},
    "tycho_progress_fn": {"Ptr{Cvoid}"},
    # DLPack 0.6 (<dlpack/dlpack.h>)
    "uint16_t": {"UInt16"},
    "uint64_t": {"UInt64"},
    "int64_t*": {"Ptr{Int64}"},
    "DLDeviceType": {"Cint"},         # a C enum: int
    "DLDevice": {"DLDevice"},
    "DLDataType": {"DLDataType"},
    "DLTensor": {"DLTensor"},
    "function pointer": {"Ptr{Cvoid}"},
}


def normalise_c_type(text: str) -> str:
    t = re.sub(r"\bconst\b", " ", text)
    t = re.sub(r"\s+", "", t)
    # `const char* const*` keeps its inner const meaning: char*const*
    if re.search(r"char\s*\*\s*const\s*\*", text):
        return "char*const*"
    return t


def split_c_param(param: str) -> str:
    """The type of `const char* toml_text` (drops the parameter name)."""
    param = param.strip()
    if param == "void" or param == "":
        return ""
    m = re.match(r"(.*?[\s\*])([A-Za-z_]\w*)$", param)
    return normalise_c_type(m.group(1) if m else param)


def c_functions(header: str) -> Dict[str, Tuple[str, List[str]]]:
    text = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    out = {}
    for m in re.finditer(r"TYCHO_API\s+([^;(]*?)\b(tycho_\w+)\s*\(([^)]*)\)\s*;", text, flags=re.S):
        ret, name, params = m.group(1), m.group(2), m.group(3)
        types = [split_c_param(p) for p in params.split(",")]
        out[name] = (normalise_c_type(ret), [t for t in types if t])
    return out


def c_struct(header: str, name: str) -> List[Tuple[str, str]]:
    text = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    m = re.search(r"typedef\s+struct\s*(?:\w+\s*)?\{([^{}]*)\}\s*" + name + r"\s*;", text)
    assert m, f"struct {name} not found in the header"
    out = []
    for f in (f.strip() for f in m.group(1).split(";")):
        if not f:
            continue
        fn = re.search(r"\(\s*\*\s*(\w+)\s*\)", f)
        out.append((fn.group(1), "function pointer") if fn else (re.search(r"(\w+)$", f).group(1), split_c_param(f)))
    return out


def julia_ccalls(jl: str) -> Dict[str, List[Tuple[List[str], str]]]:
    out: Dict[str, List[Tuple[List[str], str]]] = {}
    for m in re.finditer(r"@ccall\s+libtycho\.(\w+)\((.*?)\)::(\S+)", jl):
        name, args, ret = m.group(1), m.group(2).strip(), m.group(3)
        types = [a.split("::", 1)[1].strip() for a in split_top(args)] if args else []
        out.setdefault(name, []).append((types, ret))
    return out


def split_top(args: str) -> List[str]:
    """Splits `a::Ptr{A, B}, b::C` at top-level commas."""
    parts, depth, cur = [], 0, ""
    for ch in args:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def julia_struct(jl: str, name: str) -> List[Tuple[str, str]]:
    m = re.search(r"\nstruct\s+" + name + r"\b(.*?)\nend", jl, flags=re.S)
    assert m, f"struct {name} not found in the Julia module"
    fields = []
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if "::" in line:
            field, jtype = line.split("::", 1)
            fields.append((field.strip(), jtype.strip()))
    return fields


def check(header: str, jl: str, doc: str = "", dlpack: str = "") -> List[str]:
    problems = []
    cfuns = c_functions(header)
    if len(cfuns) < 10:
        problems.append(f"only {len(cfuns)} functions parsed from the header: the parser is broken")
    wrappers = julia_ccalls(jl)
    for name, (cret, cargs) in sorted(cfuns.items()):
        found = wrappers.get(name, [])
        if len(found) != 1:
            problems.append(f"{name}: {len(found)} @ccall wrappers, expected 1")
            continue
        jargs, jret = found[0]
        if len(jargs) != len(cargs):
            problems.append(f"{name}: {len(jargs)} arguments in Julia, {len(cargs)} in C")
        for i, (c, j) in enumerate(zip(cargs, jargs)):
            if j not in C_TO_JULIA.get(c, set()):
                problems.append(f"{name}: argument {i + 1} is C '{c}' but Julia '{j}'")
        if jret not in C_TO_JULIA.get(cret, set()):
            problems.append(f"{name}: returns C '{cret}' but Julia '{jret}'")
    for name in sorted(set(wrappers) - set(cfuns)):
        problems.append(f"{name}: wrapped in Julia but not declared in the header")
    for c_name, j_name in (("tycho_progress", "Progress"), ("tycho_session_options", "SessionOptions"),
                           ("tycho_evaluate_options", "EvaluateOptions")):
        cf, jf = c_struct(header, c_name), julia_struct(jl, j_name)
        if len(cf) != len(jf):
            problems.append(f"{j_name}: {len(jf)} fields, {c_name} has {len(cf)}")
        for i, ((cname, c), (jname, j)) in enumerate(zip(cf, jf)):
            if cname != jname or j not in C_TO_JULIA.get(c, set()):
                problems.append(f"{j_name}: field {i + 1} is C '{c} {cname}' but Julia '{jname}::{j}'")
    if dlpack:
        for c_name in ("DLDevice", "DLDataType", "DLTensor", "DLManagedTensor"):
            cf, jf = c_struct(dlpack, c_name), julia_struct(jl, c_name)
            if len(cf) != len(jf):
                problems.append(f"{c_name}: {len(jf)} fields in Julia, {len(cf)} in dlpack.h")
            for i, ((cname, c), (jname, j)) in enumerate(zip(cf, jf)):
                if cname != jname or j not in C_TO_JULIA.get(c, set()):
                    problems.append(f"{c_name}: field {i + 1} is C '{c} {cname}' but Julia '{jname}::{j}'")
    if doc:
        blocks = "\n".join(re.findall(r"```julia\n(.*?)```", doc, flags=re.S))
        if not blocks:
            problems.append("the Julia page has no ```julia block")
        defined = set(re.findall(r"^(?:function\s+|mutable struct\s+|struct\s+)?(\w+!?)\s*[({=]", jl, flags=re.M))
        defined |= set(re.findall(r"^(?:mutable\s+)?struct\s+(\w+)", jl, flags=re.M))
        for used in sorted(set(re.findall(r"\bTycho\.(\w+!?)", blocks))):
            if used not in defined:
                problems.append(f"the Julia page uses Tycho.{used}, which the module does not define")
    return problems


def self_test(header: str, jl: str) -> List[str]:
    mutations = {
        "a dropped argument": (r"(tycho_session_run\(session::Ptr\{Cvoid\}), iterations::Int64", r"\1"),
        "a wrong type": (r"iterations::Int64", "iterations::Int32"),
        "a missing wrapper": (r"\ntycho_shutdown\(\) = @ccall[^\n]*", ""),
        "a reordered struct field": (r"(    iteration::Int64[^\n]*\n)(    iterations_total::Int64[^\n]*\n)", r"\2\1"),
        "a wrong return type": (r"tycho_session_rank\(session::Ptr\{Cvoid\}\)::Int32", "tycho_session_rank(session::Ptr{Cvoid})::Int64"),
    }
    failures = []
    for what, (pattern, repl) in mutations.items():
        mutated, n = re.subn(pattern, repl, jl, count=1)
        if n != 1:
            failures.append(f"self-test: could not apply {what}")
        elif not check(header, mutated):
            failures.append(f"self-test: {what} was not caught")
    return failures


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    header, jl = open(args[0]).read(), open(args[1]).read()
    doc = open(args[2]).read() if len(args) > 2 else ""
    dlpack = open(args[3]).read() if len(args) > 3 else ""
    problems = check(header, jl, doc, dlpack)
    if "--self-test" in sys.argv:
        problems += self_test(header, jl)
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print(f"{len(c_functions(header))} functions of tycho.h: each has one @ccall wrapper with matching "
              "argument count and types; Progress, SessionOptions and EvaluateOptions match their C structs"
              + ("; DLDevice, DLDataType, DLTensor, DLManagedTensor match dlpack.h" if dlpack else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
