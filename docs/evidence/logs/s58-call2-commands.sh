# s58 call 2: call 1 again after its out-of-memory fix (0d7f4f1); no machine came for it, so it is the next
# session's first call: `bench step --full --fmt bf16 --rows 1,8,2,4` with the standard column, the compiles
# brought back. Carry [".whl", ".tcache.txz"].
bash docs/evidence/logs/s58-call1-commands.sh
