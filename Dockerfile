# crossdock: scheduler, workers and CLI in one image.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends slurm-client munge \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/crossdock
COPY pyproject.toml README.md ./
COPY crossdock ./crossdock
COPY crossdock/configs ./configs
RUN pip install --no-cache-dir '.[kubernetes]' flower
RUN useradd --create-home --uid 1000 crossdock \
 && install -d -o crossdock -g crossdock /home/crossdock/state
USER crossdock
ENV CROSSDOCK_CONFIG=/opt/crossdock/configs/crossdock.yaml \
    CROSSDOCK_STATE_DIR=/home/crossdock/state
ENTRYPOINT ["crossdock"]
CMD ["up"]
