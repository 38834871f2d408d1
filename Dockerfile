# GPU image for the full-profile notebook batch.
#   docker build -t paper-repro .
#   docker run --gpus all -v $PWD/figures:/workspace/figures paper-repro
# The base image ships torch 2.5.1 / torchvision 0.20.1 built for CUDA 12.4; pinning them
# here keeps pip from replacing them while it installs the rest.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

ENV MPLBACKEND=Agg \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /workspace

# Libraries first (a cached layer), the project after.
RUN pip install --no-cache-dir \
        torch==2.5.1 \
        torchvision==0.20.1 \
        numpy==2.4.6 \
        pandas==3.1.1 \
        matplotlib==3.11.2 \
        seaborn==0.13.2 \
        scikit-learn==1.9.1 \
        tqdm==4.70.1 \
        papermill==2.7.0 \
        jupyterlab==4.6.6 \
        ipykernel==7.4.0 \
        ipywidgets==8.1.9 \
        psutil==7.2.2 \
        nbformat==5.11.1 \
        nbval==0.11.0 \
        pytest==9.2.0 \
        pytest-timeout==2.4.0

COPY . .
RUN pip install --no-cache-dir -e .

CMD ["paper-repro", "notebooks", "run", "--profile", "full"]
