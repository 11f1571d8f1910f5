# rlsched plan's recommendation (8x SP1, static:agents/tuned/trace-azure.json@rlsched); it prints the vllm serve line
rlsched deploy --replicas 8 --devices 0,1,2,3,4,5,6,7 --sp 1 --policy static:agents/tuned/trace-azure.json --router central --profile flux1-dev-h100 --max-num-seqs 4 --out deploy.yaml
