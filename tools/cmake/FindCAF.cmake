# Finds the C++ Actor Framework 0.17 as Debian packages it (libcaf-dev ships no CMake package).
# Defines CAF::core, CAF::io and CAF::openssl, and CAF_VERSION read from caf/config.hpp.
include(FindPackageHandleStandardArgs)

find_path(CAF_INCLUDE_DIR caf/all.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
find_library(CAF_OPENSSL_LIBRARY caf_openssl)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE ".*CAF_VERSION ([0-9]+).*" "\\1" _caf_version_number "${_caf_version_line}")
  if(_caf_version_number)
    math(EXPR _caf_major "${_caf_version_number} / 10000")
    math(EXPR _caf_minor "(${_caf_version_number} / 100) % 100")
    math(EXPR _caf_patch "${_caf_version_number} % 100")
    set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
  endif()
endif()

find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND)
  find_package(Threads REQUIRED)
  # caf/openssl/*.hpp includes <openssl/ssl.h>: CAF::openssl exists only where libssl-dev does.
  find_package(OpenSSL QUIET)
  set(_caf_parts core io)
  if(OpenSSL_FOUND)
    list(APPEND _caf_parts openssl)
  endif()
  foreach(_part ${_caf_parts})
    string(TOUPPER ${_part} _upper)
    if(NOT TARGET CAF::${_part})
      add_library(CAF::${_part} SHARED IMPORTED)
      set_target_properties(CAF::${_part} PROPERTIES
        IMPORTED_LOCATION "${CAF_${_upper}_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}")
    endif()
  endforeach()
  set_property(TARGET CAF::core APPEND PROPERTY INTERFACE_LINK_LIBRARIES Threads::Threads)
  set_property(TARGET CAF::io APPEND PROPERTY INTERFACE_LINK_LIBRARIES CAF::core)
  if(TARGET CAF::openssl)
    set_property(TARGET CAF::openssl APPEND PROPERTY INTERFACE_LINK_LIBRARIES CAF::io OpenSSL::SSL)
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY)
