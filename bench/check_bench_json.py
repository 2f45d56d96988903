#!/usr/bin/env python3
"""Smoke test of dsv4-bench (meson suite 'unit').

usage: check_bench_json.py DSV4_BENCH MODEL_DIR WORK_DIR

Runs dsv4-bench briefly on MODEL_DIR (C in {1, 2}, a few tokens, with op
timings, without and with DSpark), then checks that the JSON report parses and that its fields are
present and sane, and that the gnuplot data file was written (and the PNG,
when gnuplot is installed). Exit 0 on success, 1 with a message otherwise.
"""
import json
import math
import os
import shutil
import subprocess
import sys

PROMPT, OUTPUT, CONC = 6, 4, [1, 2]


def fail(msg):
    print(f"check_bench_json: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def need(cond, msg):
    if not cond:
        fail(msg)


def num(x, what, lo=0.0, hi=math.inf, strict=False):
    need(isinstance(x, (int, float)) and not isinstance(x, bool), f"{what} is not a number: {x!r}")
    need(math.isfinite(x), f"{what} is not finite: {x!r}")
    need(x > lo if strict else x >= lo, f"{what} = {x} below {lo}")
    need(x <= hi, f"{what} = {x} above {hi}")
    return x


def stats(o, what, n):
    need(isinstance(o, dict), f"{what} missing")
    need(o.get("n") == n, f"{what}.n = {o.get('n')}, expected {n}")
    for k in ("mean", "median", "p90", "max"):
        num(o[k], f"{what}.{k}", strict=True)
    need(o["median"] <= o["p90"] + 1e-9 <= o["max"] + 2e-9, f"{what}: median <= p90 <= max broken")


def main():
    if len(sys.argv) != 4:
        fail(__doc__)
    exe, model, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    out_json = os.path.join(work, "bench.json")
    out_png = os.path.join(work, "bench.png")
    out_dat = os.path.join(work, "bench.dat")
    for p in (out_json, out_png, out_dat):
        if os.path.exists(p):
            os.remove(p)
    have_gnuplot = shutil.which("gnuplot") is not None
    cmd = [exe, "-m", model, "-c", ",".join(map(str, CONC)), "-p", str(PROMPT), "-n", str(OUTPUT),
           "--warmup", "1", "--op-timings", "--bw-bytes", str(64 << 20), "--bw-repeats", "2",
           "--json", out_json, "--plot-data", out_dat, "--dspark", "both", "--quiet"]
    if have_gnuplot:
        cmd += ["--plot", out_png]
    print(" ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240)
    need(r.returncode == 0, f"dsv4-bench exited {r.returncode}:\n{r.stderr}")
    with open(out_json) as f:
        try:
            j = json.load(f)
        except json.JSONDecodeError as e:
            fail(f"report does not parse: {e}")

    need(j.get("tool") == "dsv4-bench" and j.get("schema_version") == 1, "tool/schema_version")
    for k in ("library", "machine", "bandwidth", "model", "engine", "workload", "bytes_model", "runs"):
        need(k in j, f"top-level key {k} missing")
    num(j["machine"]["nproc"], "machine.nproc", 1)
    need(j["machine"]["cpu_model"], "machine.cpu_model empty")
    num(j["bandwidth"]["copy_gbs"], "bandwidth.copy_gbs", strict=True)
    need(j["engine"]["backend"] == "cpu", "engine.backend")
    need(j["engine"]["max_sequences"] >= max(CONC), "engine.max_sequences")
    wl = j["workload"]
    need(wl["concurrency"] == CONC and wl["prompt_tokens"] == PROMPT and wl["output_tokens"] == OUTPUT,
         "workload echoes the command")
    need(wl["prompt_source"] == "random", "workload.prompt_source")
    bm = j["bytes_model"]
    num(bm["weight_bytes_step_t1"], "bytes_model.weight_bytes_step_t1", strict=True)
    need(bm["weight_bytes_step_t1"] <= j["model"]["payload_bytes"], "weight bytes per step > checkpoint")
    n_layers = j["model"]["n_layers"]

    need(j["library"]["dspark_runs"] is True, "DSpark did not run")
    runs = j["runs"]
    got = [(r["concurrency"], r["mode"]) for r in runs]
    need(got == [(c, m) for c in CONC for m in ("off", "on")], f"runs: {got}")
    block = j["model"].get("dspark_block_size")
    for r in runs:
        c, ds = r["concurrency"], r["dspark"]
        w = f"run C={c} dspark={ds}"
        need(r["mode"] == ("on" if ds else "off"), f"{w}: mode")
        need(r["output_tokens"] == c * OUTPUT, f"{w}: output_tokens")
        if ds:
            need(1 <= r["decode_steps"] <= OUTPUT - 1, f"{w}: decode_steps {r['decode_steps']}")
            num(r["acceptance_length"], f"{w}.acceptance_length", 1.0, block + 1)
            d = r["dspark_stats"]
            need(d["block"] == block and d["drafts_accepted"] <= d["drafts_verified"], f"{w}: dspark_stats")
            need(len(d["accept_rate_by_position"]) == block, f"{w}: accept_rate_by_position")
            stats(d["draft_ms"], f"{w}.draft_ms", r["decode_steps"])
            stats(d["verify_ms"], f"{w}.verify_ms", r["decode_steps"])
            need(r["engine_timings"]["prefill"]["prefill_calls"] == c, f"{w}: engine prefill counts")
            need(r["engine_timings"]["decode"]["prefill_calls"] == 0, f"{w}: prefill in the decode phase")
            need(r["baseline"]["dspark_speedup"] > 0, f"{w}: dspark_speedup")
            stats(r["itl_ms"], f"{w}.itl_ms", c * (OUTPUT - 1))
            continue
        need(r["decode_steps"] == OUTPUT - 1, f"{w}: decode_steps {r['decode_steps']}")
        stats(r["ttft_ms"], f"{w}.ttft_ms", c)
        stats(r["prefill_ms"], f"{w}.prefill_ms", c)
        stats(r["itl_ms"], f"{w}.itl_ms", c * (OUTPUT - 1))  # one sample per token after the first
        stats(r["e2e_ms"], f"{w}.e2e_ms", c)
        stats(r["step_engine_ms"], f"{w}.step_engine_ms", OUTPUT - 1)
        need(r["ttft_ms"]["max"] <= r["e2e_ms"]["max"], f"{w}: ttft after the last token")
        # each step wall time covers the engine's own measurement of it
        need(r["step_engine_ms"]["median"] <= r["step_wall_ms"]["median"] * 1.0001 + 1e-3, f"{w}: engine > wall")
        num(r["output_tok_s"], f"{w}.output_tok_s", strict=True)
        num(r["decode_tok_s"], f"{w}.decode_tok_s", strict=True)
        need(r["output_tok_s"] <= r["decode_tok_s"] * (OUTPUT / (OUTPUT - 1)) * 1.0001, f"{w}: tok/s order")
        need(r["acceptance_length"] == 1.0, f"{w}: acceptance without DSpark")
        need(len(r["output_fnv1a64"]) == c, f"{w}: output hashes")
        ep, et = r["engine_timings"]["prefill"], r["engine_timings"]["decode"]
        need(ep["prefill_calls"] == c and ep["prefill_tokens"] == c * PROMPT and ep["decode_steps"] == 0,
             f"{w}: engine prefill-phase counts")
        need(et["prefill_calls"] == 0 and et["decode_steps"] == OUTPUT - 1 and et["decode_tokens"] == c * (OUTPUT - 1),
             f"{w}: engine decode-phase counts {et['decode_steps']} {et['decode_tokens']}")
        num(ep["prefill_ns"], f"{w}.prefill_ns", strict=True)
        num(et["decode_ns"], f"{w}.decode_ns", strict=True)
        for x in (ep, et):
            need(x["op_timings"] is True and len(x["layer_ns"]) == n_layers, f"{w}: op timings")
            num(x["ops"]["block_ns"], f"{w}.ops.block_ns", strict=True)
        # every rank's busy fraction: its layers' time within its decode calls
        need(len(r["stage_busy"]) == j["engine"]["tp"] * j["engine"]["pp"], f"{w}: stage_busy ranks")
        for i, x in enumerate(r["stage_busy"]):
            num(x, f"{w}.stage_busy[{i}]", 0.0, 1.0, strict=True)
        num(et["stage_ns"], f"{w}.stage_ns", strict=True)
        # the engine's decode time is inside the bench's decode wall time
        need(et["decode_ns"] * 1e-9 <= r["decode_wall_s"] * 1.0001, f"{w}: engine decode time > wall")
        rf = r["roofline"]
        for k in ("weight_bytes_per_step", "kv_bytes_per_step", "floor_ms_per_step", "engine_ms_per_step",
                  "step_over_floor", "effective_gbs", "fraction_of_copy_bw"):
            num(rf[k], f"{w}.roofline.{k}", strict=True)
        need(abs(rf["step_over_floor"] * rf["fraction_of_copy_bw"] - 1) < 1e-6, f"{w}: ratio inverse")
        bl = r["baseline"]
        need(bl["base_concurrency"] == 1, f"{w}: baseline base")
        num(bl["decode_tok_s_vs_base"], f"{w}.baseline.decode_tok_s_vs_base", strict=True)
        if c == 1:
            need(abs(bl["decode_tok_s_vs_base"] - 1) < 1e-9, f"{w}: baseline of C=1 is not 1")
        need(r["page_faults"]["major"] >= 0, f"{w}: page faults")

    cons = j["consistency"]
    need(cons["checked"] is True and cons["agree"] is True,
         f"greedy outputs differ between runs (batch or DSpark changed tokens): {cons['mismatches']}")

    with open(out_dat) as f:
        rows = [l.split() for l in f if l.strip() and not l.startswith("#")]
    need(len(rows) == len(runs) and all(len(x) == 11 for x in rows), f"plot data rows: {rows}")
    if have_gnuplot:
        need(os.path.getsize(out_png) > 1000, "PNG not written")
        with open(out_png, "rb") as f:
            need(f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG")
    print(f"check_bench_json: OK ({len(runs)} runs{', PNG drawn' if have_gnuplot else ''})")


if __name__ == "__main__":
    main()
