#!/bin/bash
# The GPU figures (docs/measurements.md, GPU), in one run on one GPU. Training: where a training step goes (benchmarks/profile_step.py: median step, target
# tokens/s, MFU on real and padded tokens, host time, kernel time, launches, scalar reads, syncs) at the base shape with
# 4,096 and ~25k tokens a step, float32 (TF32), bf16 autocast and bf16 weights with float32 master weights (fairseq's
# --bf16), eager and compiled (at 4,096 also compiled with
# CUDA graphs, mode reduce-overhead); the big shape in bf16. The Trainer's own per-step cost
# (benchmarks/profile_trainer.py: AaynTrainer's whole step, its batch fetch, training step, optimizer and the rest)
# at the same shape in bf16 (autocast, then `aayn train --bf16_weights true`'s bf16 weights), at the demo shape
# with the demo recipe's 1,024 tokens, and last, in the time left, compiled with CUDA graphs (reduce-overhead) at
# 4,096 tokens; it needs `datasets` and
# `evaluate`, installed from .gpu/whl where the device lacks them (pandas from .gpu/whl-pandas where it lacks that:
# `pip download --no-deps --python-version 3.12 --only-binary=:all:` of datasets, evaluate, dill, multiprocess,
# xxhash, fsspec; pandas, python-dateutil, tzdata).
# Decoding: the CUDA graphs' outputs against the plain steps' on every recorded search case
# (benchmarks/graphs_check.py), then (benchmarks/decode_gpu.py) aayn's generate, its done check every step and
# every 4, and every 4 with its decoder steps replayed from CUDA graphs (cuda_graphs=True), against
# MarianMTModel's with the same weights, beam 4 and greedy, batches of 32 and 256: the base shape at its initial
# weights (runs to the limits), and the demo model on the Bible's test verses where .gpu/ holds them (carry .gpu:
# model/demo-bible-en-fr, verses.txt); and whole `aayn translate` commands of those verses on the GPU, float32
# and bf16, with and without --cuda_graphs (times, and an md5 of each output), and bulk (`--input` of 12 files,
# the verses 5 times over) with and without --cuda_graphs; `aayn serve --device cuda` at 32
# clients with and without --cuda_graphs (benchmarks/serve_load.py; starlette, uvicorn, prometheus_client and
# the sentence splitters' wheels carried in .gpu/whl-serve, srt built as a wheel from its sdist).
# Against fairseq: fairseq 0.12 beside aayn on the same tokens (benchmarks/fairseq_side.py: a training step at each token
# budget, beam 4 on 32 sentences), from .gpu/fairseq-site.tar.xz: fairseq-fixed 0.12.3.1's cp312 wheel (the index
# has one) and hydra-core 1.3.2, omegaconf 2.3.0, antlr4-python3-runtime 4.9.3, bitarray, sacrebleu, portalocker,
# tabulate, colorama, lxml, installed with `pip install --no-deps --target fairseq-site` by a Python 3.12, then
# fairseq's torch extensions (libbase, libnat, alignment_train_cpu_binding: built for another torch, never
# imported by a translation model) removed, packed with `tar cJf`.
# STAGES picks the parts (default: train trainer graphs decode compiled cli serve demo big fairseq trainer_graphs,
# in that order; a rerun names those the first did not reach, as times.txt says); TOTAL_S (540) bounds the run.
# Run as `OUT=DIR bash benchmarks/gpu_figures.sh` from the checkout with .gpu/ beside src/ (the GPU machine has no
# network: what it lacks travels in .gpu/).
# Printed last, and kept in OUT/summary.md: the tables for docs/measurements.md (benchmarks/gpu_summary.py).
# Needs the device's torch and transformers and this tree (src/ on PYTHONPATH); CPU smoke run:
#   OUT=/tmp/o DEVICE=cpu SHAPE=demo TOKENS="256 512" STEPS=2 SENTENCES=16 bash benchmarks/gpu_figures.sh
T0=$SECONDS
say() { echo "[$((SECONDS - T0)) s] $*" | tee -a $OUT/times.txt; }
PY=${PY:-python3}; DEVICE=${DEVICE:-cuda}; SHAPE=${SHAPE:-base}; TOKENS=${TOKENS:-"4096 25000"}; STEPS=${STEPS:-20}
export PYTHONPATH=$PWD/src:$PYTHONPATH PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
mkdir -p $OUT
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null; $PY -c 'import torch, transformers
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'; lscpu | grep "Model name"; nproc; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
# the parts, the most needed first; a rerun names those the first run did not reach
STAGES=${STAGES:-"train trainer graphs decode compiled cli serve demo big fairseq trainer_graphs"}
SENTENCES=${SENTENCES:-256}; TOTAL_S=${TOTAL_S:-540}
has() { [[ " $STAGES " == *" $1 "* ]]; }
# each part gets its own limit within what is left of TOTAL_S (a command on the GPU machine is stopped at 600 s)
within() { local left=$((TOTAL_S - (SECONDS - T0))); echo $(( left < $1 ? (left > 5 ? left : 5) : $1 )); }
P="$PY benchmarks/profile_step.py --device $DEVICE --steps $STEPS"
D="$PY benchmarks/decode_gpu.py --device $DEVICE --sentences $SENTENCES --repeats 2"
train() {  # shape, tokens, arm
  timeout $(within ${ARM_S:-150}) $P --shape $1 --tokens $2 $3 --out $OUT/prof-$1 >> $OUT/steps.jsonl 2>> $OUT/steps.err
  say "$1 $3 exit $?"
}
trainer() {  # shape, tokens, arm: AaynTrainer's whole step
  timeout $(within ${ARM_S:-150}) $PY benchmarks/profile_trainer.py --device $DEVICE --steps $STEPS --shape $1 \
    --tokens $2 $3 --out $OUT/prof-$1 >> $OUT/trainer.jsonl 2>> $OUT/trainer.err
  say "trainer $1 $3 exit $?"
}
decode() {  # arguments of decode_gpu.py
  timeout $(within ${DEC_S:-180}) $D "$@" >> $OUT/decode.jsonl 2>> $OUT/decode.err
  say "decode $* exit $?"
}
if has train; then  # the bare step, eager: float32 (TF32) and bf16 autocast; bf16 >= 1.5x float32 from 8k tokens?
  train $SHAPE "$TOKENS ${MORE_TOKENS-8192}" "--dtype float32"
  train $SHAPE "$TOKENS ${MORE_TOKENS-8192}" "--dtype bf16"
  train $SHAPE "$TOKENS" "--dtype bf16_weights"  # fairseq's --bf16: no casts in the step, float32 master weights
fi
if has trainer || has trainer_graphs; then  # datasets and evaluate carried where the device lacks them
  if ! $PY -c "import datasets, evaluate" 2>/dev/null && [ -d .gpu/whl ]; then
    pandas=$($PY -c "import pandas" 2>/dev/null || echo .gpu/whl-pandas/*.whl)
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl $pandas \
      2>&1 | tail -2
    export PYTHONPATH=/tmp/site:$PYTHONPATH
  fi
fi
if has trainer; then  # the Trainer's whole step beside the bare one; bf16 autocast, then bf16 weights (aayn train
  trainer $SHAPE "$TOKENS" "--dtype bf16"  # --bf16_weights true: float32 master weights, no casts in the step)
  trainer $SHAPE "$TOKENS" "--dtype bf16_weights"
  if [ "$SHAPE" = base ]; then  # the demo job's steps (26.6 steps/s in its first GPU run): its recipe's eager
    trainer demo 1024 "--dtype bf16 --attn_implementation eager"  # attention, then SDPA
    trainer demo 1024 "--dtype bf16"
  fi
fi
if has graphs; then  # the search's CUDA graphs against its plain steps, every recorded case, before any timing
  timeout $(within 60) $PY benchmarks/graphs_check.py --device $DEVICE >> $OUT/decode.jsonl 2>> $OUT/decode.err
  say "graphs_check exit $?"
fi
has decode && decode --shape $SHAPE --profile
if has compiled; then  # the bare step compiled; with CUDA graphs where the host bounds it most (the small batch)
  train $SHAPE "$TOKENS" "--dtype bf16 --compile"
  [ "$DEVICE" = cuda ] && train $SHAPE "${TOKENS%% *}" "--dtype bf16 --compile --compile_mode reduce-overhead"
fi
if has cli && [ -d .gpu/model/demo-bible-en-fr ]; then  # whole `aayn translate` commands: 1,116 verses; bulk
  for flags in "" "--cuda_graphs" "--dtype bfloat16" "--dtype bfloat16 --cuda_graphs"; do
    name=translate${flags// /_}; start=$(date +%s%N)
    timeout $(within 90) $PY -m aayn.cli translate --model .gpu/model/demo-bible-en-fr --device $DEVICE $flags \
      < .gpu/verses.txt > $OUT/$name.txt 2>> $OUT/translate.err
    code=$?
    say "translate [$flags] exit $code $(( ($(date +%s%N) - start) / 1000000 )) ms, $(wc -l < $OUT/$name.txt) lines," \
      "md5 $(md5sum < $OUT/$name.txt | cut -c1-8)"
  done
  # bulk: the verses 5 times over (5,580) in 12 files, one `aayn translate --input` process
  mkdir -p /tmp/bulk && for i in $(seq 0 11); do
    for _ in 1 2 3 4 5; do cat .gpu/verses.txt; done | awk -v i=$i 'NR % 12 == i' > /tmp/bulk/part$i.txt
  done
  for flags in "" "--cuda_graphs"; do
    rm -rf /tmp/bulk-out; start=$(date +%s%N)
    timeout $(within 120) $PY -m aayn.cli translate --model .gpu/model/demo-bible-en-fr --device $DEVICE $flags \
      --input /tmp/bulk --output_dir /tmp/bulk-out > /dev/null 2>> $OUT/translate.err
    code=$?; ms=$(( ($(date +%s%N) - start) / 1000000 ))
    lines=$(cat /tmp/bulk-out/*.txt 2>/dev/null | wc -l)
    say "bulk [$flags] exit $code $ms ms, $lines lines, $(( lines * 1000 / (ms > 0 ? ms : 1) )) verses/s," \
      "md5 $(cat /tmp/bulk-out/*.txt 2>/dev/null | md5sum | cut -c1-8)"
  done
fi
if has serve && [ -d .gpu/model/demo-bible-en-fr ]; then  # `aayn serve` at 32 clients, with and without CUDA graphs
  if ! $PY -c "import starlette, uvicorn, prometheus_client, pysbd" 2>/dev/null && [ -d .gpu/whl-serve ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-serve \
      .gpu/whl-serve/*.whl 2>&1 | tail -2
    export PYTHONPATH=/tmp/site-serve:$PYTHONPATH
  fi
  for graphs in "" "--cuda_graphs"; do
    timeout $(within ${SERVE_S:-75}) $PY benchmarks/serve_load.py --model .gpu/model/demo-bible-en-fr \
      --sources .gpu/verses.txt --sentences 512 --clients 32 --seconds 15 --arms torch --device $DEVICE $graphs \
      >> $OUT/serve.jsonl 2>> $OUT/serve.err
    say "serve [$graphs] exit $?"
  done
fi
if has demo && [ -d .gpu/model/demo-bible-en-fr ]; then  # the trained model's decoding, float32 and bf16
  decode --model .gpu/model/demo-bible-en-fr --sources .gpu/verses.txt
  decode --model .gpu/model/demo-bible-en-fr --sources .gpu/verses.txt --dtype bf16 --beams 4
fi
if has big && [ "$DEVICE" = cuda ]; then
  train big 25000 "--dtype bf16"; train big 25000 "--dtype bf16 --compile"
fi
if has fairseq && [ -f .gpu/fairseq-site.tar.xz ]; then  # fairseq 0.12 beside aayn on the same tokens (point 4)
  mkdir -p /tmp/fs && tar xJf .gpu/fairseq-site.tar.xz -C /tmp/fs
  PYTHONPATH=/tmp/fs/fairseq-site:$PYTHONPATH timeout $(within ${ARM_S:-150}) $PY benchmarks/fairseq_side.py \
    --device $DEVICE --shape $SHAPE --tokens $TOKENS --steps $STEPS >> $OUT/fairseq.jsonl 2>> $OUT/fairseq.err
  say "fairseq exit $?"
fi
# the Trainer's step compiled with CUDA graphs (Dynamo's shapes over the buckets)
has trainer_graphs && [ "$DEVICE" = cuda ] && trainer $SHAPE "${TOKENS%% *}" "--dtype bf16 --compile --compile_mode reduce-overhead"
say "done"
for part in steps trainer decode fairseq translate serve; do  # the last error lines of each part, where it has any
  grep -hE "Error|Traceback" $OUT/$part.err 2>/dev/null | tail -2
done
$PY benchmarks/gpu_summary.py $OUT | tee $OUT/summary.md  # the tables for docs/measurements.md, printed last
