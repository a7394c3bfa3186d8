#!/usr/bin/env python3
"""Latency experiments of issue 20 item 6: ib_write_lat -s 2 between two vnics under
several daemon settings (environment of `up`), interleaved, plus sockperf TCP one-way."""
import importlib.machinery, importlib.util, json, os, sys, time, statistics, subprocess
from pathlib import Path
ROOT = Path(sys.argv[1]).resolve()
BUILD = ROOT / "build"
loader = importlib.machinery.SourceFileLoader("bench_run", str(ROOT / "bench" / "run"))
spec = importlib.util.spec_from_loader(loader.name, loader)
br = importlib.util.module_from_spec(spec); loader.exec_module(br)
MODES = json.loads(sys.argv[2])       # {"name": {"ENV": "value"}}
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
OUT = open(sys.argv[4] if len(sys.argv) > 4 else "/tmp/lat/results.jsonl", "a")
TEST = json.loads(sys.argv[5]) if len(sys.argv) > 5 else ["ib_write_lat", "-s", "2", "-n", "5000"]

class Args: build = str(BUILD); seconds = 2; lat_iters = 2000

def restart(scene, env):
    for name, ip in zip(scene.vnics[9000], scene.vnic_ip[9000]):
        br.run([scene.vnic, "down", name], check=False, timeout=30)
    for name, ip in zip(scene.vnics[9000], scene.vnic_ip[9000]):
        br.run([scene.vnic, "up", "--name", name, "--ip", f"{ip}/24", "--bridge", scene.br, "--mtu", "9000"],
               env={**os.environ, **env})
    for i in (0, 1):
        scene.wait_ping(scene.ns[i], scene.vnic_ip[9000][1 - i])

def record(**kw):
    kw["time"] = time.strftime("%H:%M:%S")
    print(json.dumps(kw), flush=True)
    OUT.write(json.dumps(kw) + "\n"); OUT.flush()

with br.Scene(str(BUILD / "cli" / "rrdma-vnic")) as scene:
    bench = br.Bench(Args, scene)
    bench.tcp(); record(mode="tcp", **{k: v for k, v in bench.rows[-1].items() if k in ("test", "latency_us")})
    names = list(MODES)
    for r in range(ROUNDS):
        order = names if r % 2 == 0 else list(reversed(names))
        for name in order:
            restart(scene, MODES[name])
            pids = scene.daemon_pids(9000)
            time.sleep(0.5)
            c0 = br.cpu_seconds(pids); t0 = time.monotonic(); time.sleep(2)
            idle_cpu = (br.cpu_seconds(pids) - c0) / (time.monotonic() - t0)
            c0 = br.cpu_seconds(pids); t0 = time.monotonic()
            out = bench.perftest(TEST[0], 9000, TEST[1:])
            busy_cpu = (br.cpu_seconds(pids) - c0) / (time.monotonic() - t0)
            f = bench.result_line(out, 6)
            record(mode=name, test=" ".join(TEST), round=r, t_min=float(f[2]), t_typical=float(f[4]), t_avg=float(f[5]),
                   p99=float(f[7]) if len(f) > 7 else None, daemons_cpu_idle=round(idle_cpu, 4),
                   daemons_cpu_lat=round(busy_cpu, 3), loadavg=open("/proc/loadavg").read().split()[0])
    bench.tcp(); record(mode="tcp", **{k: v for k, v in bench.rows[-1].items() if k in ("test", "latency_us")})
