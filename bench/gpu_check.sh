#!/usr/bin/env bash
# The GPU script: run from the repository root on a machine with an NVIDIA GPU, with the
# packages Tessera needs installed (numba-cuda, CuPy, PyTorch, Triton, ncu optional).
# Writes logs under $OUT (default ./gpu-out): environment, the GPU tests, the launch
# benchmark and an ncu listing of Tessera's kernel names. About 5 minutes on an H100.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TESSERA_CACHE_DIR="$(mktemp -d)"
{
  nvidia-smi -L
  python -c "import numpy, numba, numba_cuda, llvmlite; print('numpy', numpy.__version__, 'numba', numba.__version__, 'llvmlite', llvmlite.__version__)"
  python -m tessera.cli info 2>&1 | head -30
} > "$OUT/env.txt" 2>&1
GPU_TESTS=${GPU_TESTS:-"tests/test_cuda_gpu.py tests/test_cuda_reduction_tree.py tests/test_gpu_paths.py tests/test_dist_gpu.py tests/test_cuda_direct_launch.py tests/test_cuda_plain_dot.py tests/test_cuda_shared_limit.py tests/test_aot_gpu.py tests/test_ops_aliasing.py tests/test_gpu_8bit.py tests/test_cuda_f32_mainloop.py"}
# the tests compile dozens of kernels: in parallel where pytest-xdist is installed
XDIST=$(python -c "import xdist" 2>/dev/null && echo "-n ${TEST_WORKERS:-8}")
timeout "${TEST_S:-180}" python -m pytest -q -rfE -p no:cacheprovider $XDIST $GPU_TESTS 2>&1 | tee "$OUT/tests.log"
# the C runtime's launch cost (issue 33): the AOT GPU test prints it
timeout 60 python -m pytest -q -s -p no:cacheprovider tests/test_aot_gpu.py -k block_sum 2>&1 \
  | grep -E "tsrLaunch|passed|failed" | tee "$OUT/aot_launch.log"
BENCHES=${BENCHES:-"gpu_launch gpu_rows gpu_gemm gpu_gemm8 gpu_attention gpu_capture"}
timeout "${BENCH_S:-180}" python -m bench $BENCHES 2>&1 | tee "$OUT/bench.log"
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then  # NCU=0 skips the profiles
  timeout ${NCU_S:-45} ncu --metrics gpu__time_duration.sum python -c "
import numpy as np, tessera
from numba import cuda
from bench.kernels import empty
empty[1](cuda.to_device(np.zeros(16, np.float32)))
tessera.synchronize()
" > "$OUT/ncu.log" 2>&1
  grep -E '^\s+[_A-Za-z].*\(' "$OUT/ncu.log" | head -5
  timeout ${NCU_S:-60} ncu --kernel-name regex:softmax --launch-skip 1 --launch-count 1 \
    --metrics dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
    python -c "
import numpy as np, tessera
from numba import cuda
from tessera import op
x = cuda.to_device(np.ones((4096, 4096), np.float32))
op.softmax(x); op.softmax(x)
tessera.synchronize()
" > "$OUT/ncu_kernels.log" 2>&1
  tail -12 "$OUT/ncu_kernels.log"
  timeout ${NCU_S:-60} ncu --kernel-name regex:gemm_f16 --launch-skip 1 --launch-count 1 --section WarpStateStats \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,launch__registers_per_thread \
    python -c "
import numpy as np, tessera
from numba import cuda
from bench.kernels import gemm_f16
a = cuda.to_device(np.ones((4096, 4096), np.float16))
c = cuda.device_array((4096, 4096), np.float32)
for _ in range(2):
    gemm_f16[(32, 32)](a, a, c, 128, 128, 32)
tessera.synchronize()
" >> "$OUT/ncu_kernels.log" 2>&1
  tail -40 "$OUT/ncu_kernels.log"
  timeout ${NCU_S:-60} ncu --kernel-name regex:attention --launch-skip 1 --launch-count 1 \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,launch__registers_per_thread \
    python -c "
import numpy as np, tessera
from numba import cuda
from tessera import op
q = cuda.to_device(np.ones((4096, 64), np.float16))
for _ in range(2):
    op.flash_attention(q, q, q)
tessera.synchronize()
" >> "$OUT/ncu_kernels.log" 2>&1
  tail -12 "$OUT/ncu_kernels.log"
fi
# the benchmarks' JSON records, in one file (the GPU run's logs come back as at most 8 files)
tar -czf "$OUT/results.tgz" bench/results/gpu_*.json 2>/dev/null
