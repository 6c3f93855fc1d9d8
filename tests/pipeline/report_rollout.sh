#!/usr/bin/env bash
# `cuda-agent report` of a real CPU rollout, opened in headless Chromium. Two smoke tasks with the
# demo policy: one demonstration as shipped (reward 1) plus a comment holding "</script><!--" (it
# must stay text), one made wrong on purpose (reward -1). The page that rollout writes beside
# summary.json and the page `report` writes from the log must both draw with no script error or
# console message, their Table 1 cells must equal summary.json's, every episode link must land on
# its section; the learning curves draw from a metrics.jsonl in train's format; bad input is one
# line with status 2. The screenshot is kept as ARTIFACTS/report.png (with the page beside it).
set -euo pipefail
bin="$(realpath "$1")"
artifacts="$2"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
browser="$(command -v chromium || command -v chromium-browser || true)"
# Skipped (status 77) only where no browser is installed: tools/setup.sh installs the Debian
# package chromium, so CI runs it; a GPU host set up from tools/gpu/fetch_debs.sh has none.
[ -n "$browser" ] || { echo "SKIPPED: no chromium on PATH (apt-get install chromium; tools/setup.sh does)"; exit 77; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
chmod 755 "$scratch"  # sandboxed commands may run as another user and must reach the workdir
cd "$source_dir"

mkdir -p "$scratch/demos" "$artifacts"
cp -r corpus/demos/smoke/smoke_01_relu corpus/demos/smoke/smoke_02_gelu "$scratch/demos/"
printf '\n# </script><script>window.injected = 1</script><!-- must stay text\n' >>"$scratch/demos/smoke_01_relu/model_new.py"
sed -i 's/return cuda_extension.gelu_forward(x)$/return cuda_extension.gelu_forward(x) * 2.0  # wrong on purpose/' \
  "$scratch/demos/smoke_02_gelu/model_new.py"
grep -q "wrong on purpose" "$scratch/demos/smoke_02_gelu/model_new.py" || { echo "FAILED: the wrong demo was not written"; exit 1; }

"$bin" --set rollout.runs_dir="$scratch/runs" --set policy.demo_dir="$scratch/demos" \
  --set policy.tools_dir="$source_dir/skills/tools" --set harness.timed_runs=5 --set harness.warmup_runs=2 \
  rollout --corpus smoke --policy demo --device cpu --tasks 'smoke_0[12]*' --log "$scratch/log" --run-id ci \
  >"$scratch/out" 2>"$scratch/err" || { cat "$scratch/out"; tail -20 "$scratch/err"; exit 1; }
cat "$scratch/out"
grep -qx "report: $scratch/runs/ci/report.html" "$scratch/out" || { echo "FAILED: rollout did not say where its report is"; exit 1; }
"$bin" report "$scratch/log" --out "$scratch/report.html" | grep -qx "report: $scratch/report.html"

# The learning curves, from lines as `cuda-agent train` writes them (metrics_of in train_command.cpp).
cat >"$scratch/metrics.jsonl" <<'EOF'
{"step":1,"stage":"rft","stage_step":1,"episodes":2,"tokens":900,"reward_mean":1.0,"tokens_per_s":300.0,"sft_loss":2.5,"actor_grad_norm":1.2}
{"step":2,"stage":"rft","stage_step":2,"episodes":2,"tokens":900,"reward_mean":1.0,"tokens_per_s":310.0,"sft_loss":1.9,"actor_grad_norm":1.0}
{"step":3,"stage":"ppo","stage_step":1,"episodes":2,"tokens":900,"reward_mean":0.5,"tokens_per_s":280.0,"policy_loss":0.1,"value_loss":0.4,"approx_kl":0.01,"entropy":1.1}
EOF
"$bin" report "$scratch/log" --out "$scratch/report-metrics.html" --metrics "$scratch/metrics.jsonl" >/dev/null

# Each page: its DOM after the scripts ran, and everything the page wrote to the console.
open_page() {  # PAGE NAME
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --user-data-dir="$scratch/chromium" --enable-logging=stderr --v=0 --dump-dom "file://$1" \
    >"$scratch/$2.dom" 2>"$scratch/$2.console"
  if grep -E "CONSOLE|Uncaught" "$scratch/$2.console"; then echo "FAILED: $2 wrote to the console"; exit 1; fi
}
open_page "$scratch/runs/ci/report.html" rollout
open_page "$scratch/report.html" command
open_page "$scratch/report-metrics.html" metrics

python3 - "$scratch" "$scratch/runs/ci/summary.json" <<'PY'
import html.parser, json, sys
scratch, summary = sys.argv[1], json.load(open(sys.argv[2]))

class Page(html.parser.HTMLParser):
    def __init__(self, path):
        super().__init__(convert_charrefs=True)
        self.by_id, self.links, self.scripts, self.stack, self.sources = {}, [], 0, [], []
        self.rects = []
        self.feed(open(path).read())
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a: self.by_id[a["id"]] = (tag, a)
        if tag == "a" and a.get("href", "").startswith("#"): self.links.append(a["href"][1:])
        if tag == "script": self.scripts += 1
        if tag == "rect": self.rects.append(a)
        if tag == "pre" and "data-path" in a: self.stack.append(len(self.sources)); self.sources.append([a["data-path"], ""])
    def handle_endtag(self, tag):
        if tag == "pre" and self.stack: self.stack.pop()
    def handle_data(self, data):
        if self.stack: self.sources[self.stack[-1]][1] += data

def check(name):
    page = Page(f"{scratch}/{name}.dom")
    assert page.by_id["report-errors"][1]["data-count"] == "0", f"{name}: the page recorded errors"
    rows = {"overall": summary["overall"], **{f"level-{k}": v for k, v in summary["levels"].items()}}
    compared = 0
    for row, values in rows.items():
        for key, want in values.items():
            got = json.loads(page.by_id[f"summary-{row}-{key}"][1]["data-value"])
            assert (got is None and want is None) or abs(got - want) <= 1e-12 * max(1, abs(want)), (name, row, key, got, want)
            compared += 1
    failures = page.by_id["infrastructure-failures"][1]["data-count"]
    assert int(failures) == len(summary["infrastructure_failures"]), (name, failures)
    missing = [l for l in page.links if l not in page.by_id]
    assert not missing, f"{name}: links to no anchor: {missing}"
    episodes = [l for l in page.links if l.startswith("episode-ci-")]
    assert len(set(episodes)) == 2, (name, episodes)
    bars = {r["data-category"]: int(r["data-count"]) for r in page.rects if "data-category" in r}
    assert bars.get("1") == 1 and bars.get("-1") == 1, (name, bars)
    assert page.scripts == 3, f"{name}: {page.scripts} script elements: text of the log became markup"
    paths = [p for p, _ in page.sources]
    assert any(p == "model_new.py" and "</script><script>window.injected = 1</script><!-- must stay text" in text
               for p, text in page.sources), paths
    assert {"kernels/relu.cpp", "kernels/gelu_binding.cpp"} <= set(paths), paths
    return page, compared

for name in ("rollout", "command"):
    page, compared = check(name)
    assert "no-learning" in page.by_id, f"{name}: the learning section does not say there are no metrics"
    print(f"{name} page: drawn without errors; {compared} Table 1 cells equal summary.json's; links land")
page, _ = check("metrics")
curves = [i for i in page.by_id if i.startswith("curve-")]
assert {"curve-sft_loss", "curve-reward_mean", "curve-policy_loss"} <= set(curves), curves
print("metrics page: learning curves", ", ".join(sorted(c[6:] for c in curves)))
PY
grep -q 'data-rendered="yes"' "$scratch/rollout.dom" || { echo "FAILED: the page's script did not finish"; exit 1; }

timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
  --user-data-dir="$scratch/chromium" --hide-scrollbars --window-size=1280,3200 \
  --screenshot="$artifacts/report.png" "file://$scratch/runs/ci/report.html" >/dev/null 2>&1
[ "$(head -c 8 "$artifacts/report.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
  || { echo "FAILED: no screenshot"; exit 1; }
cp "$scratch/runs/ci/report.html" "$artifacts/report.html"
echo "screenshot: $artifacts/report.png (the page: $artifacts/report.html)"

# Bad input: one line naming the problem and the fix, status 2.
mkdir -p "$scratch/not-a-log" "$scratch/empty-log" "$scratch/corrupt-log"
first_segment="$(ls "$scratch/log"/*.seg | head -1)"
head -c 32 "$first_segment" >"$scratch/empty-log/$(basename "$first_segment")"  # a header, no record
cp "$scratch/log"/*.seg "$scratch/corrupt-log/"
python3 - "$scratch/corrupt-log/$(basename "$first_segment")" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[len(data) // 2] ^= 0xFF
open(sys.argv[1], "wb").write(data)
PY
expect_error() {  # PATTERN ARGS...
  local pattern="$1" status
  shift
  set +e
  "$bin" report "$@" --out "$scratch/bad.html" >"$scratch/bad_out" 2>"$scratch/bad_err"
  status=$?
  set -e
  [ "$status" -eq 2 ] && [ "$(wc -l <"$scratch/bad_err")" -eq 1 ] && grep -q "$pattern" "$scratch/bad_err" \
    && [ ! -e "$scratch/bad.html" ] || { echo "FAILED: report $*: status $status, stderr:"; cat "$scratch/bad_err"; exit 1; }
  echo "report $*: $(cat "$scratch/bad_err")"
}
expect_error "no such directory" "$scratch/no-such-dir"
expect_error "is a file" "$scratch/out"
expect_error "is not a message log" "$scratch/not-a-log"
expect_error "is empty" "$scratch/empty-log"
expect_error "is corrupt" "$scratch/corrupt-log"
expect_error "holds no episode of run 'nope'" "$scratch/log" --run-id nope
echo "report: both pages drawn in Chromium with Table 1 as summary.json has it; bad input is one line with status 2"
