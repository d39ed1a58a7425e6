# The GPU check's slim wheel (packaging/bootstrap.py build-cuda-slim), injected in place of
# llama_cpp_extras.cmake with -DCMAKE_PROJECT_llama_cpp_INCLUDE=<this file>: everything that one does,
# and each library built as one file.
#
# llama.cpp gives libllama, libggml, libggml-base (and libmtmd) a VERSION and SOVERSION, so each is
# installed as libX.so, libX.so.0 and libX.so.0.N.M; a wheel holds no symlinks, so these are three
# copies, and llama-cpp-python loads libX.so by name while the others link libX.so.0. Without the two
# properties CMake writes one file, libX.so, with the soname libX.so, so its users' NEEDED entries
# and llama-cpp-python's ctypes name the same file. (NO_SONAME would not do: a library without a
# soname is recorded in its users by the path it was linked with, here `bin/libggml.so`.) The
# libraries' RUNPATH stays $ORIGIN (llama-cpp-python's install rule).

include("${CMAKE_CURRENT_LIST_DIR}/llama_cpp_extras.cmake")

function(clover_one_file_per_library)
    set(done "")
    foreach(target IN ITEMS llama ggml ggml-base mtmd)
        if(TARGET ${target})
            set_property(TARGET ${target} PROPERTY VERSION)
            set_property(TARGET ${target} PROPERTY SOVERSION)
            list(APPEND done ${target})
        endif()
    endforeach()
    message(STATUS "clover: one file per library (no VERSION, SOVERSION): ${done}")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL clover_one_file_per_library)
