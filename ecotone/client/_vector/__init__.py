"""The sans-IO core of `VectorEnv` and `AsyncVectorEnv`, one module per concept.

Importers name the module they need; this package re-exports nothing, so that importing
`policy` (the autoreset modes and error policies) does not import numpy, as `import ecotone`
must not. One way only, lowest first (an import-linter contract in pyproject.toml):

    policy      the autoreset mode and the error policy
    failures    how a sub-env fails: Failure, the errors raised
    subenvs     links, sub-envs, the requests in flight, what a call waits for
    frames      the frames the vector env sends pre-encoded, the typed answer decoder
    batching    Gymnasium's conventions: actions split, seeds, batched infos, stack
    ledger      Ledger: the core's state and the primitives every part shares
    planning | answers | links | results
                the four parts of the core, each a Ledger subclass, none importing another:
                what to send, what the answers mean, connections and deadlines, what a
                call returns
    core        VectorCore, the four parts as one class, and the faces' argument helpers
"""
