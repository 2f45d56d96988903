# Sourced (bash) on a GPU machine without Open MPI or NCCL installed system-wide, after
# `. .devdeps/env.sh` has unpacked the Debian packages under /tmp/devdeps (bring them with
# `/work/shared/tools/device-deps fetch libopenmpi-dev openmpi-bin openmpi-common libhwloc15
# libpmix2 libfabric1 libucx0 libibverbs1 libpsm2-2 libpsm-infinipath1 librdmacm1
# libevent-pthreads-2.1-7 libgfortran5 libnl-3-200 libnl-route-3-200 libnuma1 libltdl7
# libmunge2`). docs/distributed.md, "Running on a GPU machine".
#
# Open MPI from the unpacked tree: OPAL_PREFIX relocates its compiled-in /usr paths (orted,
# MCA components, help files), OPAL_SYSCONFDIR its /etc/openmpi; Debian's mpirun is an
# alternatives link, so mpirun/mpicc links go in a bin folder on PATH (meson's
# find_program('mpirun') and pkg-config ompi-c then find them). One node: shared-memory
# transport only (pml ob1, btl self,vader; no single-copy mechanism, which containers forbid).
#
# NCCL: lib/dist/nccl.c dlopens libnccl.so.2 through the loader path; a pip-installed torch
# ships it in site-packages/nvidia/nccl/lib, which goes on LD_LIBRARY_PATH.
_gd_root=${DEVDEPS_ROOT:-/tmp/devdeps}
if [ -x "$_gd_root/usr/bin/orterun" ]; then
  export OPAL_PREFIX=$_gd_root/usr
  export OPAL_SYSCONFDIR=$_gd_root/etc/openmpi
  mkdir -p "$_gd_root/mpibin"
  ln -sf "$_gd_root/usr/bin/orterun" "$_gd_root/mpibin/mpirun"
  ln -sf "$_gd_root/usr/bin/opal_wrapper" "$_gd_root/mpibin/mpicc"
  export PATH=$_gd_root/mpibin:$_gd_root/usr/bin:$PATH
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
fi
_gd_nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
if [ -z "$_gd_nccl" ] || [ ! -e "$_gd_nccl/libnccl.so.2" ]; then
  _gd_nccl=$(find / -xdev -name 'libnccl.so.2' -print -quit 2>/dev/null)
  _gd_nccl=${_gd_nccl%/*}
fi
if [ -n "$_gd_nccl" ]; then
  export LD_LIBRARY_PATH=$_gd_nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
echo "gpu-dist-env: mpirun $(command -v mpirun || echo absent), NCCL ${_gd_nccl:-absent}"
