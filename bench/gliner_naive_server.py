"""The baseline server of bench/extract.py: FastAPI + uvicorn calling GLiNER's `predict_entities` once per request.

This is how a GLiNER model is commonly put behind HTTP: a blocking endpoint (FastAPI runs it on its thread
pool), one model call per request, no batching across callers.

    python bench/gliner_naive_server.py FOLDER PORT THREADS
"""

from __future__ import annotations

import sys
import warnings
from typing import Any


def main() -> None:
    folder, port, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    import torch
    import uvicorn
    from fastapi import FastAPI
    from gliner import GLiNER

    torch.set_num_threads(threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GLiNER.from_pretrained(folder, local_files_only=True).eval()
    app = FastAPI()

    @app.get("/readyz")
    def ready() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/extract")
    def extract(body: dict[str, Any]) -> dict[str, Any]:
        ents = model.predict_entities(body["text"], body["labels"], threshold=body.get("threshold", 0.5))
        return {"entities": [{k: e[k] for k in ("text", "label", "score", "start", "end")} for e in ents]}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
