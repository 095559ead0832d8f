"""Run SCALE-Sim v3 itself (the oracle) on a .cfg and topology; runs inside SCALE-Sim's own virtualenv.

Usage: python scalesim_oracle.py CFG TOPOLOGY conv|gemm OUTDIR. Prints the simulation's seconds.
SCALE-Sim v3.0.0 refuses a .cfg without [layout] and [sparsity] sections and needs a layout
file even when custom layouts are off; `scalesim_compare.py` writes complete .cfg files and this
script an empty layout file, neither of which changes the timing.
"""
import os
import sys
import time

from scalesim.scale_sim import scalesim


def main() -> None:
    cfg, topology, form, out = sys.argv[1:5]
    os.makedirs(out, exist_ok=True)
    layout = os.path.join(out, "layout.csv")
    with open(layout, "w") as f:
        f.write("Layer name,\n")
    began = time.perf_counter()
    sim = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topology, layout=layout,
                   input_type_gemm=form == "gemm")
    sim.run_scale(top_path=out)
    print(f"seconds {time.perf_counter() - began:.3f}")


if __name__ == "__main__":
    main()
