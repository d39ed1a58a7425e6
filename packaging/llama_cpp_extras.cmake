# Injected into llama-cpp-python's build by packaging/bootstrap.py with
#   -DCMAKE_PROJECT_llama_cpp_INCLUDE=<this file>
# so it runs right after llama-cpp-python's `project(llama_cpp)` and defers its work to the end of
# that CMakeLists, once llama.cpp's targets exist.
#
# Why: llama-cpp-python 0.3.36 installs a fixed list of targets (llama, ggml, ggml-base, ggml-cpu,
# ggml-cuda, ...). With -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON the CPU backend is built as
# one loadable module per instruction-set level (ggml-cpu-x64, ggml-cpu-haswell, ggml-cpu-zen4, ...),
# which that list does not name, so the wheel would ship without any CPU backend. This installs
# every ggml-cpu-* module beside libllama, the folder llama.cpp is told to load backends from
# (app/llama_backend.py calls ggml_backend_load_all_from_path on it).
#
# CLOVER_BUNDLE_LIBS (optional, a ;-list of files) are installed into the same folder: the CUDA
# build puts the CUDA runtime (libcudart) there, so that a user's machine needs only the driver.

function(clover_install_backend_modules)
    get_property(ggml_targets DIRECTORY "${CMAKE_SOURCE_DIR}/vendor/llama.cpp/ggml/src" PROPERTY BUILDSYSTEM_TARGETS)
    set(installed "")
    foreach(target IN LISTS ggml_targets)
        get_target_property(kind ${target} TYPE)
        if(target MATCHES "^ggml-cpu-.+" AND kind MATCHES "^(MODULE|SHARED)_LIBRARY$")
            llama_cpp_python_install_target(${target})
            list(APPEND installed ${target})
        endif()
    endforeach()
    message(STATUS "clover: installing CPU backend variants: ${installed}")
    if(CLOVER_BUNDLE_LIBS)
        install(FILES ${CLOVER_BUNDLE_LIBS} DESTINATION ${SKBUILD_PLATLIB_DIR}/llama_cpp/lib)
        message(STATUS "clover: bundling ${CLOVER_BUNDLE_LIBS}")
    endif()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL clover_install_backend_modules)

# Each library carries its own libstdc++, with the symbols hidden, and binds its own symbols to
# itself (Linux, GCC). Why: llama.cpp's C++ calls into libstdc++ (`std::ostream::operator<<` in
# llama_model::print_info, the first load's first stringstream) are bound at run time by name, first
# in the process's global scope. A library that exports its own static copy of libstdc++ and is
# loaded there first (RTLD_GLOBAL, LD_PRELOAD, or a host program) takes those calls, and its copy's
# locale facets do not match the stream's: a SIGSEGV in print_info (ggml-org/llama.cpp#22434 has the
# trace). Linked in and hidden, those calls bind inside each library at link time; -Bsymbolic does
# the same for the template code each library holds itself (std::stringbuf's destructor, ctype's
# widen: weak symbols that the global scope would otherwise hand to the foreign copy too). It also
# runs on a system whose libstdc++ is older than the compiler's. llama.cpp's libraries talk to each
# other through C APIs only, so no C++ object crosses from one copy to another. About 1 MB per
# library. tests/machine/test_llama_isolation.py loads a model beside such a foreign copy.
if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    set(_clover_isolated "-static-libstdc++ -Wl,--exclude-libs,libstdc++.a -Wl,-Bsymbolic")
    string(APPEND CMAKE_SHARED_LINKER_FLAGS " ${_clover_isolated}")
    string(APPEND CMAKE_MODULE_LINKER_FLAGS " ${_clover_isolated}")
    message(STATUS "clover: libstdc++ linked into each library, its symbols hidden; -Bsymbolic")
endif()
