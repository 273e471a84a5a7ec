# What `cmake --install` puts beside the programs (CMakeLists.txt installs those):
#
#  - the systemd units of the server and the client daemon in lib/systemd/system, with the
#    prefix's bin/ in ExecStart filled in at install time (so `--prefix` and cpack's /usr
#    are honoured), in the components of their programs;
#  - the client-side libraries, their headers under include/fedcore (the repository's own
#    tree, so `#include "client/daemon.hpp"` reads the same in and out of the tree) and a
#    CMake package: find_package(Fedcore) gives Fedcore::client, Fedcore::model, ... with
#    their dependencies (component Fedcore_Development). tests/install/ builds a small
#    consumer against an installed tree.
#
# A consumer compiles against the libraries' own CPU level (FEDCORE_ARCH) and, with
# OpenBLAS, with EIGEN_USE_BLAS: Eigen's inline code must be the same on both sides of the
# library boundary (alignment, kernels), so both come with the targets.

foreach(unit fedcore-server fedcore-client)
  if(unit STREQUAL "fedcore-server")
    set(component Fedcore_Server)
  else()
    set(component Fedcore_Client)
  endif()
  install(CODE "
    set(FEDCORE_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
    configure_file(\"${PROJECT_SOURCE_DIR}/cmake/${unit}.service.in\"
      \"${CMAKE_BINARY_DIR}/systemd/${unit}.service\" @ONLY)
    file(INSTALL \"${CMAKE_BINARY_DIR}/systemd/${unit}.service\"
      DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")"
    COMPONENT ${component})
endforeach()

# The client library and everything it links, with the names a consumer uses.
set(fedcore_exported
  fedcore_util fedcore_data fedcore_model fedcore_asio fedcore_tls fedcore_protocol
  fedcore_net fedcore_privacy fedcore_secagg fedcore_client)
foreach(target ${fedcore_exported})
  string(REPLACE "fedcore_" "" short ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${short})
endforeach()
target_compile_options(fedcore_util INTERFACE $<INSTALL_INTERFACE:-march=${FEDCORE_ARCH}>)
if(FEDCORE_OPENBLAS)
  target_compile_definitions(fedcore_util INTERFACE $<INSTALL_INTERFACE:EIGEN_USE_BLAS>)
endif()
install(TARGETS ${fedcore_exported} EXPORT FedcoreTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Fedcore_Development)
foreach(folder shared client)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder}/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fedcore/${folder} COMPONENT Fedcore_Development
    FILES_MATCHING PATTERN "*.hpp")
endforeach()
set(fedcore_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Fedcore)
install(EXPORT FedcoreTargets NAMESPACE Fedcore:: DESTINATION ${fedcore_cmake_dir}
  COMPONENT Fedcore_Development)
include(CMakePackageConfigHelpers)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/FedcoreConfig.cmake.in
  ${CMAKE_BINARY_DIR}/FedcoreConfig.cmake INSTALL_DESTINATION ${fedcore_cmake_dir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/FedcoreConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/FedcoreConfig.cmake
  ${CMAKE_BINARY_DIR}/FedcoreConfigVersion.cmake
  DESTINATION ${fedcore_cmake_dir} COMPONENT Fedcore_Development)
