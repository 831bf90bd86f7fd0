"""Deliberately broken training loops and their fixes, one module per bottleneck pattern.

Each module runs as a script (so it can run under ``nsys profile``)::

    python -m helpers.workloads.data_stall --variant broken --steps 20
    python -m helpers.workloads.data_stall --variant fixed --profile runs/

and offers the same pieces to the notebooks: ``VARIANTS``, ``make_step(variant, device)``.
On a CUDA machine they run on the GPU, else on the CPU, sized to finish a profiled run within
about 30 s on two CPU cores.
"""
