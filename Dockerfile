# GPU Ledger: one image for web (gunicorn), Celery worker and beat.
FROM python:3.11-slim-bookworm

# DEBUG is off in the image: it refuses to start without a real SECRET_KEY (or SECRET_KEY_FILE).
ENV DEBUG=false \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 gpuledger
WORKDIR /app

COPY requirements.txt .
RUN pip install -r requirements.txt

COPY . .
# The deep backfill's C XOR chunk decoder (ledger/deep/_xor.c), compiled in place; the compiler
# is removed again in the same layer.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && python ledger/deep/build_native.py \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
# plotly.js is served from static/vendor/, taken from the pinned plotly package (never a CDN).
RUN mkdir -p static/vendor \
    && cp "$(python -c 'import plotly, os; print(os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js"))')" static/vendor/plotly.min.js \
    && SECRET_KEY=collectstatic-only-never-used-to-sign-anything-at-run-time \
       CACHE_URL=locmem:// python manage.py collectstatic --no-input

USER gpuledger
EXPOSE 8000
CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
