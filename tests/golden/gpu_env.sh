# gpu_env.sh — sourced by the GPU-machine scripts with their BIN_DIR (see
# gpu_e2e.sh): the programs and the libraries the machine lacks come from
# there, NCCL's NVLink multicast stays off.  Sets bin and launch.
bin=$(cd "$1" && pwd) || exit 2
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NANOLLM_WORKER="$bin/nanollm-worker"
launch="$bin/nanollm-launch"
