"""Check an instruction set in IFEval's layout with lm-eval's own IFEval code.

    python benchmarks/data/check_instructions.py FILE [--responses R.jsonl] [--against F ...]

Runs checks 1-7 of DEV-SETS-NOTES.md on every line of FILE: fields and unique integer keys;
known ids; kwargs build and have exactly the instruction's keys; the checkers keep the values
given; no conflicting pair (both directions); check_following runs on a sample text; the
prompt states every kwarg value. --against names earlier sets whose requests (a prompt's first
sentence) must not be repeated. --responses (lines of {"key", "response"}, one per line of
FILE) adds check 8: every response passes IFEval's strict scorer. Exits 1 on any problem.
"""

import argparse
import json
import re
import sys
from pathlib import Path

from specem_chain.evaluation.ifeval import harness

FIELDS = {"key", "prompt", "instruction_id_list", "kwargs"}
RELATION = {
    "less than": ("less than", "fewer than", "under", "shorter than"),
    "at least": ("at least",),
}
ORDINAL = ["first", "second", "third", "fourth", "fifth", "sixth"]
VERBATIM = {"section_spliter", "postscript_marker"}  # case matters to the checker


def lines(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def same(kwargs):
    """kwargs with word lists sorted, as the keyword checkers sort them."""
    return {k: sorted(v) if isinstance(v, list) else v for k, v in kwargs.items()}


def request(prompt):
    return " ".join(re.split(r"(?<=[.?!])\s", prompt.strip())[0].lower().split())


def stated(prompt, key, value, languages):
    """Problems with how the prompt states one kwarg value (check 7)."""
    low = prompt.lower()
    if key == "prompt_to_repeat":
        return [] if prompt.startswith(value) else ["prompt does not start with prompt_to_repeat"]
    if key == "language":
        return [] if languages[value] in prompt else [f"language {languages[value]} not named"]
    if key in ("relation", "let_relation", "capital_relation"):
        return [] if any(w in low for w in RELATION[value]) else [f"no relation word for {value!r}"]
    if key == "letter":
        return [] if f'"{value}"' in low else [f"letter {value!r} not stated in quotes"]
    if key == "nth_paragraph":
        found = re.search(rf"\b{value}\b", prompt) or ORDINAL[value - 1] in low
        return [] if found else [f"nth_paragraph {value} not stated"]
    if isinstance(value, int):
        return [] if re.search(rf"\b{value}\b", prompt) else [f"{key} {value} not stated"]
    for v in [value] if isinstance(value, str) else value:
        if (v not in prompt) if key in VERBATIM else (v.lower() not in low):
            return [f"{key} {v!r} not stated"]
    return []


def check_line(rec, util, languages, seen):
    reg = util.instructions_registry
    if set(rec) != FIELDS:
        return [f"fields {sorted(rec)}"]
    key, prompt, ids, kwargs = (rec[f] for f in ("key", "prompt", "instruction_id_list", "kwargs"))
    if not (type(key) is int and isinstance(prompt, str) and isinstance(ids, list)):
        return ["wrong field types"]
    if not (isinstance(kwargs, list) and len(kwargs) == len(ids) and ids):
        return ["kwargs must be one dict per instruction"]
    if key in seen:
        return [f"duplicate key {key}"]
    seen.add(key)
    problems = []
    for iid, kw in zip(ids, kwargs):
        if iid not in reg.INSTRUCTION_DICT:
            problems.append(f"unknown id {iid}")
            continue
        inst = reg.INSTRUCTION_DICT[iid](iid)
        try:
            inst.build_description(**kw)
        except (TypeError, ValueError) as error:
            problems.append(f"{iid}: {error}")
            continue
        if set(kw) != set(inst.get_instruction_args_keys()) or not all(kw.values()):
            problems.append(f"{iid}: kwargs keys {sorted(kw)} (or an empty value)")
        if same(inst.get_instruction_args() or {}) != same(kw):
            problems.append(
                f"{iid}: the checker changed the values to {inst.get_instruction_args()}"
            )
        inst.check_following("A short sample answer. It has two sentences.")
        for k, v in kw.items():
            problems += [f"{iid}: {p}" for p in stated(prompt, k, v, languages)]
    for a in ids:
        for b in ids:
            if a != b and (b in reg.INSTRUCTION_CONFLICTS[a] or a in reg.INSTRUCTION_CONFLICTS[b]):
                problems.append(f"conflicting pair {a} / {b}")
    if len(set(ids)) != len(ids):
        problems.append("an instruction appears twice")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--responses")
    parser.add_argument("--against", nargs="*", default=[])
    args = parser.parse_args(argv)
    util = harness()  # puts NLTK's Punkt tables in place before lm-eval is imported
    from lm_eval.tasks.ifeval.instructions_util import LANGUAGE_CODES

    records = lines(args.file)
    earlier = {request(r["prompt"]) for f in args.against for r in lines(f)}
    problems, seen = [], set()
    for rec in records:
        found = check_line(rec, util, LANGUAGE_CODES, seen)
        if isinstance(rec.get("prompt"), str) and request(rec["prompt"]) in earlier:
            found.append("request repeats an earlier set")
        problems += [f"key {rec.get('key')}: {p}" for p in found]
    if args.responses:
        answers = {r["key"]: r["response"] for r in lines(args.responses)}
        passed = 0
        for rec in records:
            if rec.get("key") not in answers:
                problems.append(f"key {rec.get('key')}: no response")
                continue
            try:
                inp = util.InputExample(**{f: rec[f] for f in FIELDS})
                out = util.test_instruction_following_strict(inp, answers[rec["key"]])
            except (KeyError, TypeError, ValueError) as error:
                problems.append(f"key {rec.get('key')}: cannot be scored ({error})")
                continue
            passed += out.follow_all_instructions
            if not out.follow_all_instructions:
                problems.append(f"key {rec['key']}: response fails {out.follow_instruction_list}")
        print(f"satisfiability: {passed}/{len(records)} responses pass the strict scorer")
    for p in problems:
        print(p)
    print(f"{len(records)} lines, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
