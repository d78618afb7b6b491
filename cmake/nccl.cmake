# Optional GPU backend. PYHOROVOD_WITH_NCCL:
#   AUTO - build it when nvcc (CUDA toolkit) and NCCL headers/library are found, else skip quietly;
#   ON   - build it, fail with a clear message when something is missing;
#   OFF  - skip.
# NCCL is looked up in NCCL_ROOT / NCCL_HOME, then in the nvidia-nccl-cu13/-cu12 wheel of the Python
# that builds us (nvidia/nccl/{include,lib}), then the system. The wheel ships only libnccl.so.2, so we
# link it by full path.
string(TOUPPER "${PYHOROVOD_WITH_NCCL}" _phv_nccl_mode)
set(PHV_NCCL_BUILT OFF)
if(NOT _phv_nccl_mode STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])"
    OUTPUT_VARIABLE _phv_wheel_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_path(PHV_NCCL_INCLUDE_DIR nccl.h
    HINTS $ENV{NCCL_ROOT}/include $ENV{NCCL_HOME}/include "${_phv_wheel_nccl}/include")
  find_library(PHV_NCCL_LIBRARY NAMES nccl libnccl.so.2
    HINTS $ENV{NCCL_ROOT}/lib $ENV{NCCL_HOME}/lib "${_phv_wheel_nccl}/lib")
  set(_phv_missing "")
  if(NOT CMAKE_CUDA_COMPILER)
    list(APPEND _phv_missing "nvcc (the CUDA toolkit; set CUDACXX or put nvcc on PATH)")
  endif()
  if(NOT PHV_NCCL_INCLUDE_DIR OR NOT PHV_NCCL_LIBRARY)
    list(APPEND _phv_missing "NCCL (nccl.h and libnccl.so.2: pip install nvidia-nccl-cu13, or set NCCL_ROOT)")
  endif()
  if(_phv_missing)
    if(_phv_nccl_mode STREQUAL "ON")
      message(FATAL_ERROR "PYHOROVOD_WITH_NCCL=ON but missing: ${_phv_missing}")
    endif()
    message(STATUS "pyhorovod: GPU backend not built (missing: ${_phv_missing})")
  else()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80;90")  # Ampere and Hopper; override with -DCMAKE_CUDA_ARCHITECTURES
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    add_library(phv_nccl STATIC
      "${CMAKE_SOURCE_DIR}/csrc/backends/nccl_backend.cc"
      "${CMAKE_SOURCE_DIR}/csrc/backends/cuda_staged_backend.cc"
      "${CMAKE_SOURCE_DIR}/csrc/backends/cuda_router.cc"
      "${CMAKE_SOURCE_DIR}/csrc/backends/cuda_kernels.cu")
    set_target_properties(phv_nccl PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                                              POSITION_INDEPENDENT_CODE ON)
    target_include_directories(phv_nccl PUBLIC "${CMAKE_SOURCE_DIR}/csrc" "${PHV_NCCL_INCLUDE_DIR}")
    # cudart linked statically: the module then imports on machines without the CUDA runtime on the
    # loader path (the driver is opened lazily at the first CUDA call).
    target_link_libraries(phv_nccl PUBLIC CUDA::cudart_static "${PHV_NCCL_LIBRARY}")
    target_compile_definitions(phv_nccl PUBLIC PHV_WITH_NCCL=1)
    # The core calls the backend through gpu_backend.h; linking it in turns the stub off.
    target_link_libraries(phv_core PUBLIC phv_nccl)
    target_compile_definitions(phv_core PUBLIC PHV_WITH_NCCL=1)
    get_filename_component(_phv_nccl_dir "${PHV_NCCL_LIBRARY}" DIRECTORY)
    set(PHV_NCCL_RPATH "${_phv_nccl_dir}")
    set(PHV_NCCL_BUILT ON)
    message(STATUS "pyhorovod: GPU backend ON (NCCL ${PHV_NCCL_LIBRARY})")
  endif()
endif()
