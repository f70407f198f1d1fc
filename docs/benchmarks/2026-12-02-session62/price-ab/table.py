import json, os, sys
def q(xs, p):
    xs = sorted(xs); return xs[min(len(xs)-1, int(p*len(xs)))] if xs else float("nan")
print("| run | service | loop moves (/min) | connections moved | refused for cost | price fixed part, median over the run (end) | move duration median / p90 | skew median / p90 / % windows > 1.2 |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
tot = {}
for d in sys.argv[1:]:
    arm = os.path.basename(d.rstrip("/"))
    for s in ["http", "echo", "bulk"]:
        moves = []
        for line in open(os.path.join(d, "service-%s.log" % s), errors="replace"):
            if line.startswith("{"):
                try: m = json.loads(line)
                except ValueError: continue
                if m.get("event") == "move" and str(m.get("cause","")).startswith("balance"): moves.append(m)
        done = [m for m in moves if "error" not in m]
        polls = [json.loads(l) for l in open(os.path.join(d, "rebalance-%s.jsonl" % s)) if l.strip()]
        ratios = []
        for a, b in zip(polls, polls[1:]):
            sa, sb = a["status"], b["status"]; span = sb["uptime_ns"] - sa["uptime_ns"]
            if span <= 0: continue
            was = {x["queue"]: x["busy_ns"] for x in sa["queues"]}
            busy = [(x["busy_ns"] - was.get(x["queue"], 0)) / span for x in sb["queues"]]
            mean = sum(busy)/len(busy)
            if mean >= 0.05: ratios.append(max(busy)/mean)
        mc = polls[-1]["status"]["move_cost"]
        fixed = [p["status"]["move_cost"]["fixed_ns"]/1e6 for p in polls]
        conns = sum(m.get("connections",0) for m in done)
        durs = [m.get("duration_us",0)/1e3 for m in done]
        t = tot.setdefault(arm, [0,0,0])
        t[0] += len(done); t[1] += conns; t[2] += mc.get("refused_for_cost",0)
        print("| %s | %s | %d (%.1f) | %d | %d | %.2f ms (%.2f) | %.1f / %.1f ms | %.2f / %.2f / %.0f %% |" % (
            arm, s, len(done), len(done)/8.0, conns, mc.get("refused_for_cost",0), q(fixed,0.5), mc["fixed_ns"]/1e6,
            q(durs,0.5), q(durs,0.9), q(ratios,0.5), q(ratios,0.9), 100.0*sum(r>1.2 for r in ratios)/max(1,len(ratios))))
print()
for arm, (m, c, r) in tot.items():
    print("- %s: %d loop moves, %d connections moved, %d refused for cost (three services)" % (arm, m, c, r))
