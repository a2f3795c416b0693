"""Table 7 (score per package, range, items, overlap) and Table 8 (what differs between the stacks).

Table 8 is generated from what each package ran: lm-eval's task configs and invocation, HELM's
run_spec/scenario_state and its client's request cache, Inspect's eval log (plan, generate config,
model args) and, for every stack, the prompts actually sent. Nothing in it is typed by hand, so a
changed package setting changes the table (tests/crosspkg/test_table8.py).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from pathlib import Path

from safetyrepro.atomic import atomic_write
from safetyrepro.markdown import markdown_table as table

DEFAULT_STACKS = ("lm-eval", "helm", "inspect")  # package defaults: the range is over these
ALL_STACKS = ("lm-eval", "helm", "inspect", "inspect-greedy")
AXES = (
    "candidate object",
    "prompt boilerplate and primer",
    "chat template",
    "system prompt",
    "decoding as executed",
    "few-shot",
    "answer extraction",
    "normalisation",
    "item set",
)


# ----------------------------------------------------------------------------- Table 7


def table7(native: dict, benchmarks) -> list[dict]:
    rows = []
    for b in benchmarks:
        row: dict = {"benchmark": b}
        keys = {}
        for s in ALL_STACKS:
            recs = native.get(s, {}).get("records", {}).get(b)
            if not recs:
                row[s] = None
                row[f"{s} n"] = 0
                continue
            row[s] = sum(r.correct for r in recs) / len(recs)
            row[f"{s} n"] = len(recs)
            keys[s] = {r.key for r in recs}
        scored = [row[s] for s in DEFAULT_STACKS if row.get(s) is not None]
        row["packages"] = len(scored)
        row["range"] = (max(scored) - min(scored)) if len(scored) >= 2 else None
        present = [s for s in DEFAULT_STACKS if s in keys]
        for a, c in itertools.combinations(present, 2):
            row[f"overlap {a}∩{c}"] = len(keys[a] & keys[c])
        row["overlap all"] = len(set.intersection(*(keys[s] for s in present))) if len(present) >= 2 else None
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- Table 8


def _template_frame(tokenizer) -> tuple[str, str] | None:
    """(text before, text after) a lone user message in the chat template, with the generation prompt."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    mark = "\x00USER\x00"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": mark}], tokenize=False, add_generation_prompt=True
    )
    before, _, after = text.partition(mark)
    return before, after


def _system_frame(tokenizer) -> tuple[str, str] | None:
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    mark = "\x00SYS\x00"
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "system", "content": mark}, {"role": "user", "content": "u"}],
            tokenize=False,
            add_generation_prompt=True,
        )
    except Exception:  # noqa: BLE001 - a template without a system role
        return None
    before, _, after = text.partition(mark)
    return before, after.split("u")[0]


def chat_applied(prompt: str, tokenizer) -> bool:
    frame = _template_frame(tokenizer)
    return bool(frame and frame[1].strip() and prompt.endswith(frame[1]))


def system_in_prompt(prompt: str, tokenizer) -> str | None:
    """The system text the prompt carries (the template's default or a given one), or None."""
    frame = _system_frame(tokenizer)
    if not frame or not chat_applied(prompt, tokenizer):
        return None
    before, after = frame
    i = prompt.find(before)
    if i < 0:
        return None
    start = i + len(before)
    end = prompt.find(after, start) if after else -1
    return prompt[start:end] if end > start else None


def _short(text: str, n: int = 90) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= n else text[: n - 1] + "…"


def _first(recs):
    return recs[0] if recs else None


def _lm_eval_cells(
    meta: dict, recs: list, benchmark: str, first, prompt: str, chat, system, opts: str
) -> dict[str, str]:
    """lm-eval's Table 8 cells: its task config and invocation as recorded."""
    cells: dict[str, str] = {}
    task = meta.get("tasks", {}).get(benchmark)
    cfg = meta.get("results", {}).get("configs", {}).get(task, {})
    inv = meta.get("invocation", {})
    out_type = cfg.get("output_type", "?")
    cells["candidate object"] = (
        f"{out_type}: log-likelihood of each of {opts} answer texts "
        f"(doc_to_choice `{_short(str(cfg.get('doc_to_choice')), 40)}`), "
        f"target_delimiter {cfg.get('target_delimiter')!r}"
    )
    primer = "QA primer (6 Q/A pairs) in doc_to_text" if "prompt_qa" in str(cfg.get("doc_to_text")) else "no primer"
    cells["prompt boilerplate and primer"] = (
        f"description {cfg.get('description', '')!r}; {primer}; prompt ends {_short(prompt[-60:], 60)!r}"
    )
    cells["chat template"] = (
        f"{'on' if chat else 'off'} (apply_chat_template={inv.get('apply_chat_template')}, "
        f"fewshot_as_multiturn={inv.get('fewshot_as_multiturn')})"
    )
    cells["system prompt"] = repr(system) if system else f"none (system_instruction={inv.get('system_instruction')!r})"
    gk = inv.get("gen_kwargs")
    cells["decoding as executed"] = (
        "none: log-likelihood scoring, nothing generated"
        if out_type == "multiple_choice"
        else f"generate_until {cfg.get('generation_kwargs')} gen_kwargs={gk}"
    )
    nshot = meta.get("results", {}).get("n-shot", {}).get(task)
    cells["few-shot"] = (
        f"{nshot} (num_fewshot={cfg.get('num_fewshot')}, "
        f"fewshot_split={cfg.get('fewshot_split') or cfg.get('training_split')})"
    )
    metrics = [m.get("metric") for m in cfg.get("metric_list", [])]
    cells["answer extraction"] = "argmax of summed log-likelihoods" + (
        f" ({_short(str(cfg.get('process_results')), 50)})" if cfg.get("process_results") else ""
    )
    cells["normalisation"] = (
        f"none on the headline `acc` (unnormalised sums); metrics {', '.join(map(str, metrics[:3]))}"
        f"{'…' if len(metrics) > 3 else ''}"
    )
    lim = meta.get("invocation", {}).get("limit")
    cells["item set"] = (
        f"first {len(recs)} docs of {cfg.get('test_split') or cfg.get('validation_split')} in "
        f"dataset order (limit={lim}); data {meta.get('datasets', {}).get(benchmark, cfg.get('dataset_path'))}"
    )
    return cells


def _helm_cells(meta: dict, recs: list, benchmark: str, first, prompt: str, chat, system, opts: str) -> dict[str, str]:
    """HELM's Table 8 cells: its adapter spec and the request as recorded."""
    cells: dict[str, str] = {}
    spec = meta.get("specs", {}).get(benchmark, {})
    a = spec.get("adapter_spec", {})
    req = (first.meta.get("request") if first else {}) or {}
    cells["candidate object"] = (
        f"{a.get('method')}: {opts} options lettered in the prompt "
        f"(reference_prefix {a.get('reference_prefix')!r}), one generated completion"
    )
    cells["prompt boilerplate and primer"] = (
        f"instructions {_short(a.get('instructions', ''), 60)!r}; input_prefix "
        f"{a.get('input_prefix')!r}; output_prefix {a.get('output_prefix')!r}"
    )
    cells["chat template"] = (
        f"{'on' if chat else 'off'} (HuggingFaceClient auto: "
        f"{'applied' if meta.get('chat_template_applied') else 'not applied'}; one user turn)"
    )
    cells["system prompt"] = repr(system) + " (template default)" if system else "none"
    sent_t = meta.get("sent_temperature")
    cells["decoding as executed"] = (
        f"temperature {req.get('temperature')} in the request"
        f"{f' → {sent_t} with sampling in the HF client' if sent_t is not None else ''}"
        f", max_tokens {req.get('max_tokens')}, stop {req.get('stop_sequences')}, "
        f"num_completions {req.get('num_completions')}"
    )
    cells["few-shot"] = f"{a.get('max_train_instances')} (run expander; HELM's spec default is 5)"
    cells["answer extraction"] = (
        f"completion.strip() looked up in output_mapping; output_mapping_pattern {a.get('output_mapping_pattern')!r}"
    )
    metrics = [m.get("class_name", "").split(".")[-1] for m in spec.get("metric_specs", [])]
    cells["normalisation"] = f"exact match of the mapped reference ({', '.join(metrics)}); unmapped scores 0"
    cells["item set"] = (
        f"{len(recs)} of the eval split sampled with np.random.seed(0) "
        f"(--max-eval-instances {a.get('max_eval_instances') or len(recs)}); scenario "
        f"{spec.get('scenario_spec', {}).get('class_name', '').split('.')[-1]} "
        f"{spec.get('scenario_spec', {}).get('args')}"
    )
    return cells


def _inspect_cells(
    meta: dict, recs: list, benchmark: str, first, prompt: str, chat, system, opts: str
) -> dict[str, str]:
    """Inspect's Table 8 cells: its plan, generate config and eval as recorded."""
    cells: dict[str, str] = {}
    m = meta.get("meta", {}).get(benchmark, {})
    plan = m.get("plan") or {}
    steps = [s.get("solver") for s in plan.get("steps", [])]
    gcfg = m.get("model_generate_config", {})
    margs = m.get("model_args", {})
    do_sample = margs.get("do_sample", "unset → provider default True")
    ev = m.get("eval", {})
    cells["candidate object"] = (
        f"{'+'.join(map(str, steps)) or 'multiple_choice'}: {opts} options lettered "
        "'A) …', one generated completion; scorer "
        f"{', '.join(s.get('name', '') for s in ev.get('scorers') or []) or 'choice'}"
    )
    user = first.meta.get("user_prompt", "") if first else ""
    cells["prompt boilerplate and primer"] = f"multiple_choice template: {_short(user.split(chr(10))[0], 80)!r}"
    cells["chat template"] = f"{'on' if chat else 'off'} (hf provider: tokenizer chat template)"
    cells["system prompt"] = repr(system) + " (template default)" if system else "none"
    temp = gcfg.get("temperature", "unset")
    cells["decoding as executed"] = (
        f"do_sample={do_sample}, temperature={temp}"
        f"{' (HF default 1.0, top_k 50)' if temp == 'unset' and do_sample is not False else ''}, "
        f"max_tokens={gcfg.get('max_tokens')}, seed={gcfg.get('seed')}"
    )
    cells["few-shot"] = "0 (no demonstrations in the solver)"
    cells["answer extraction"] = "parse_answers: last 'ANSWER: <letter>' line (strict, then lenient regex)"
    cells["normalisation"] = "letter upper-cased, trailing period stripped; no answer scores 0"
    ds = ev.get("dataset", {})
    cells["item set"] = (
        f"first {len(recs)} samples of {ds.get('name')} ({ds.get('samples')} samples, "
        f"shuffled={ds.get('shuffled')}); limit={ev.get('config', {}).get('limit')}"
    )
    return cells


def stack_axes(stack: str, meta: dict, recs: list, benchmark: str, tokenizer=None) -> dict[str, str]:
    """The Table 8 cells of one stack on one benchmark, from its recorded meta and prompts."""
    first = _first(recs)
    prompt = first.prompt if first else ""
    chat = chat_applied(prompt, tokenizer) if tokenizer is not None else None
    system = system_in_prompt(prompt, tokenizer) if tokenizer is not None else None
    n_opts = sorted({len(r.options) for r in recs}) if recs else []
    opts = f"{n_opts[0]}" if len(n_opts) == 1 else (f"{n_opts[0]}-{n_opts[-1]}" if n_opts else "?")
    cells_of = {"lm-eval": _lm_eval_cells, "helm": _helm_cells}.get(stack, _inspect_cells)
    return cells_of(meta, recs, benchmark, first, prompt, chat, system, opts)


def table8(native: dict, benchmarks, tokenizer=None) -> list[dict]:
    """Rows (benchmark, axis) × stacks, with a `differs` flag (△ when the stacks' values differ)."""
    if tokenizer is None:
        tokenizer = _tokenizer_for(native)
    rows = []
    for b in benchmarks:
        cells = {}
        for s in ALL_STACKS:
            if s not in native or not native[s]["records"].get(b):
                continue
            cells[s] = stack_axes(
                s.split("-greedy")[0] if s == "inspect-greedy" else s,
                native[s]["meta"],
                native[s]["records"][b],
                b,
                tokenizer,
            )
        for axis in AXES:
            row = {"benchmark": b, "axis": axis}
            vals = []
            for s in ALL_STACKS:
                v = cells.get(s, {}).get(axis)
                row[s] = v
                if v is not None and s in DEFAULT_STACKS:
                    vals.append(_norm_cell(v))
            row["differs"] = "△" if len(set(vals)) > 1 else "="
            rows.append(row)
    return rows


def _norm_cell(v: str) -> str:
    """The part of a cell that names the value (before any parenthesised or `;` detail)."""
    head = re.split(r" \(|; ", v, maxsplit=1)[0]
    return re.sub(r"\d+ (docs|samples|of the eval)", "N", head)


def _tokenizer_for(native: dict):
    for s in native.values():
        folder = s.get("meta", {}).get("model_folder", {}).get("path")
        if folder and Path(folder).is_dir():
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(folder)
    return None


# ----------------------------------------------------------------------------- output


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{100 * v:.1f}"
    return str(v)


def markdown_table(rows: list[dict], cols: list[str], headers: list[str] | None = None) -> str:
    return table(headers or cols, ([_fmt(r.get(c)) for c in cols] for r in rows))


def table7_markdown(rows: list[dict]) -> str:
    cols = ["benchmark", *DEFAULT_STACKS, "inspect-greedy", "range", "lm-eval n", "helm n", "inspect n"]
    ov = sorted({k for r in rows for k in r if k.startswith("overlap")})
    return markdown_table(rows, cols + ov, [*cols[:5], "range (pp)", *cols[6:], *ov])


def table8_markdown(rows: list[dict]) -> str:
    return markdown_table(rows, ["benchmark", "axis", "differs", *ALL_STACKS])


def write_tables(out: Path, t7: list[dict], t8: list[dict]) -> None:
    for name, rows in (("table7", t7), ("table8", t8)):
        cols = list(dict.fromkeys(k for r in rows for k in r))
        atomic_write(out / f"{name}.csv", csv_text(rows, cols), root=out)
    atomic_write(out / "table7.md", table7_markdown(t7) + "\n", root=out)
    atomic_write(out / "table8.md", table8_markdown(t8) + "\n", root=out)
    atomic_write(out / "tables.json", json.dumps({"table7": t7, "table8": t8}, indent=1, default=str), root=out)


def csv_text(rows: list[dict], cols: list[str]) -> str:
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()
