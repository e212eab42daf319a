#!/usr/bin/env python3
"""Compile HIP C++ files with NVRTC (no GPU needed) and fail on any warning.

Usage: nvrtc_compile.py --arch sm_90 FILE.hip [FILE.hip ...]
Finds libnvrtc and the CUDA headers in the pip wheels nvidia-cuda-nvrtc and
nvidia-cuda-runtime (13.x), as installed by scripts/install-toolchains.sh.
"""
import argparse, ctypes, glob, os, sys

def find_cuda():
    import nvidia
    for root in nvidia.__path__:
        for sub in ("cu13", "cuda_nvrtc", "cuda_runtime"):
            base = os.path.join(root, sub)
            libs = glob.glob(os.path.join(base, "lib", "libnvrtc.so*"))
            inc = os.path.join(base, "include")
            if libs and os.path.exists(os.path.join(inc, "cuda_fp16.h")):
                return sorted(libs)[0], inc
    sys.exit("nvrtc_compile: libnvrtc / cuda_fp16.h not found; run scripts/install-toolchains.sh")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--ptx-out", help="write each file's PTX here (for ptxas -v or cuobjdump on a GPU machine)")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    lib, inc = find_cuda()
    # NVRTC dlopens its builtins library by soname: load it first, globally.
    for b in sorted(glob.glob(os.path.join(os.path.dirname(lib), "libnvrtc-builtins.so*"))):
        ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
    nvrtc = ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    failed = 0
    for path in args.files:
        src = open(path, "rb").read()
        prog = ctypes.c_void_p()
        rc = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, path.encode(), 0, None, None)
        assert rc == 0, rc
        opts = [f"--gpu-architecture={args.arch}", "--fmad=false", "-std=c++17", f"-I{inc}"]
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        text = log.value.decode(errors="replace").strip()
        ptx_size = ctypes.c_size_t()
        if rc == 0:
            nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(ptx_size))
        if rc != 0 or text:
            failed += 1
            print(f"FAIL {path} (nvrtc rc={rc})\n{text}")
        else:
            print(f"ok   {path} ({ptx_size.value} bytes of PTX for {args.arch})")
            if args.ptx_out:
                ptx = ctypes.create_string_buffer(ptx_size.value)
                nvrtc.nvrtcGetPTX(prog, ptx)
                os.makedirs(args.ptx_out, exist_ok=True)
                out = os.path.join(args.ptx_out, os.path.splitext(os.path.basename(path))[0] + ".ptx")
                with open(out, "wb") as f:
                    f.write(ptx.value)
        nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    sys.exit(1 if failed else 0)

if __name__ == "__main__":
    main()
