# Turns OpenCL C files into one C source of NUL-terminated arrays, so the library needs
# no kernel files at run time: cl/NAME.cl becomes `const char fcl_cl_NAME[]`.
# Run as: cmake -DOUTPUT=out.c "-DINPUTS=a.cl|b.cl" -P embed_cl.cmake
set(body "/* Generated from the cl/ kernel files by cmake/embed_cl.cmake: do not edit. */\n")
string(REPLACE "|" ";" INPUTS "${INPUTS}")
foreach(input IN LISTS INPUTS)
  get_filename_component(name "${input}" NAME_WE)
  file(READ "${input}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x[0-9a-f][0-9a-f],){16}" "\\0\n" bytes "${bytes}")
  string(APPEND body "const char fcl_cl_${name}[] = {\n${bytes}0x00};\n")
endforeach()
file(WRITE "${OUTPUT}.tmp" "${body}")
# Rewrite only on change, so an unchanged kernel does not relink everything.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
