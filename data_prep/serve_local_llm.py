"""Serve a local causal LM behind an OpenAI-compatible API (/v1/chat/completions, /v1/models).

    python data_prep/serve_local_llm.py                       # SmolLM2-135M-Instruct, offline, port 8000
    python data_prep/serve_local_llm.py --model /path/to/hf_folder --name my-model --port 8001

Then run the LLM data steps with llm=local (base_url http://127.0.0.1:8000/v1). Non-streaming;
one generation at a time. See gsr-train serve-llm --help for the options.
"""

from gsr_train.commands.serve_llm import main

if __name__ == "__main__":
    main()
