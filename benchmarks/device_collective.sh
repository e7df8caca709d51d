#!/bin/bash
# The collective path's measurements that 2 cores cannot make, in one run on a lent device machine
# (16 cores, one GPU), each part under its own time limit, its output kept in $OUT as it goes:
#
#   1. the round of an 11.2 M-parameter model whose gradient costs nothing, against a gloo
#      all-reduce of the same vector and against DDP, n = 4, 8, 16, star and collective;
#   2. GPU workers: ResNet-18, batch 256, 4 workers sharing the GPU, star and collective, against
#      DDP run the same way on the same GPU, with and without one worker 0.2 s late;
#   3. crossover: the MLP at three widths (0.33, 2.11, 11.16 M parameters), n = 8, star and
#      collective: where the collective path starts to gain (what the default transport follows);
#   4. ddp_small: the small model against Ray Train's DDP (bench_ddp.py), both transports.
#
# From the repository root, after `bash ../shared/tools/ray-bundle` here (carry .devbundle):
#   . .devbundle/setup.sh && bash benchmarks/device_collective.sh [round] [gpu] [crossover] [ddp_small]
# (no names: all four, about 9 minutes on 16 cores; two calls of two fit one call's 10-minute limit).
# A dry run on a machine without a GPU: DRY=1 bash benchmarks/device_collective.sh (small sizes).
set -u
py=${PYTHON:-python3}  # the device machine has python3 (and maybe no `python`)
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "# $(hostname) $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null)" \
    | tee "$out/machine.txt"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | tee -a "$out/machine.txt"

part() {  # part NAME SECONDS COMMAND...: run under a limit, keep its output, show its tail
    local name=$1 limit=$2
    shift 2
    echo "== $name ($limit s): $*"
    local start=$SECONDS
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    echo "   exit $? after $((SECONDS - start)) s"
    grep -v "Warning\|warnings.warn\|^\s*$" "$out/$name.txt" | tail -n 30
}

if [ -n "${DRY:-}" ]; then
    part round 300 "$py" benchmarks/bench_collective.py --no-compute --hidden 256 --workers 4 --rounds 8 --delay 0 \
        --schemes uncoded
    part gpu 300 "$py" benchmarks/bench_device.py --only speed --device cpu --engines ray --rounds 3 --batch 16 \
        --out "$out/device.json"
    exit 0
fi
parts=${*:-round gpu crossover ddp_small}
for p in $parts; do
    case $p in
        round) for n in 4 8 16; do  # one table each: a part cut short keeps the numbers before it
                part "round_n$n" 120 "$py" benchmarks/bench_collective.py --no-compute --workers "$n" --rounds 15 \
                    --delay 0 --schemes uncoded
            done ;;
        gpu) part gpu 200 "$py" benchmarks/bench_device.py --only speed --engines ray --rounds 15 --delay 0.2 \
            --out "$out/device.json" ;;
        crossover) part crossover 150 "$py" benchmarks/bench_collective.py --hidden 256 1024 2862 --workers 8 \
            --rounds 15 --delay 0 --schemes uncoded ;;
        ddp_small) part ddp_small 120 "$py" benchmarks/bench_ddp.py --repeats 1 --transports channels collective ;;
        *) echo "unknown part $p (round, gpu, crossover, ddp_small)"; exit 2 ;;
    esac
done
