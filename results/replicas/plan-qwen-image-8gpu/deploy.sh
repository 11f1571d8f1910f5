# rlsched plan's recommendation (4x CFG2, static:agents/tuned/default.json@rlsched); it prints the vllm serve line
rlsched deploy --replicas 4 --devices 0,1,2,3,4,5,6,7 --sp 1 --cfg-parallel 2 --policy static:agents/tuned/default.json --router central --profile qwen-image-h200-vllm-omni --max-num-seqs 4 --out deploy.yaml
