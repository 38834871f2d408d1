# GPU image for the full-profile notebook batch.
#   docker build -t paper-repro .
#   docker run --gpus all -v /data:/data -v $PWD/results:/app/results \
#       -v $PWD/figures:/app/figures -v $PWD/out:/app/out paper-repro
# The libraries are requirements.lock, the very versions the tests run. torch 2.14.1 from
# PyPI is built for CUDA 13.0 and carries its own CUDA runtime, cuBLAS, cuDNN and NCCL as
# nvidia-* wheels, so the base image needs no CUDA of its own; the host needs an NVIDIA
# driver of the R580 branch or newer (>= 580.65.06, CUDA 13.0) and the NVIDIA Container
# Toolkit for --gpus. Data, results, figures and executed notebooks are mounted volumes:
# a sweep's results store outlives the container and resumes in the next one.
FROM python:3.11-slim-bookworm

ENV MPLBACKEND=Agg \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

WORKDIR /app

# Libraries first (a cached layer that changes only with the lock), the project after.
COPY requirements.lock .
RUN pip install --no-cache-dir -r requirements.lock

COPY . .
RUN pip install --no-cache-dir --no-deps -e .

VOLUME ["/app/results", "/app/figures", "/app/out"]

CMD ["paper-repro", "notebooks", "run", "--profile", "full"]
