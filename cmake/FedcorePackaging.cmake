# Debian packages with CPack (`cpack` in a build tree; docs/operations.md, "Debian packages"):
#
#   fedcore-server   fedcore-server, fedcore-sim, fedcore-train, fedcore-dist, fedcore-pki,
#                    the dashboard, the fedcore-server.service unit
#   fedcore-client   fedcore-client and the fedcore-client.service unit
#   python3-fedcore  the Python SDK (python/README.md)
#   fedcore-dev      the client libraries, headers and CMake package (find_package(Fedcore))
#
# Installed under /usr. The maintainer scripts (packaging/deb/) create the `fedcore` system
# user, /etc/fedcore (root:fedcore 0750: configs and keys) and /var/lib/fedcore (fedcore
# 0750: the history and checkpoints), reload systemd and restart a running unit after an
# upgrade; they never enable or start a unit (it needs a config and certificates first)
# and a purge keeps /var/lib/fedcore (a federation's history is not the package's to
# delete). Runtime dependencies are listed by hand: dpkg-shlibdeps would name the
# libopenblas0 metapackage, while the programs link the OpenMP build by its path.
#
# A package built from a `native` tree runs only on CPUs like the build machine's: build
# the ones you ship from the portable preset (FEDCORE_ARCH=x86-64-v2; README "CPU targets").
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME fedcore)
set(CPACK_PACKAGE_VENDOR "Fedcore")
set(CPACK_PACKAGE_CONTACT "Fedcore maintainers <fedcore@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Federated learning over mutual TLS")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
set(fedcore_runtime_depends "libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1, libgomp1, libssl3 (>= 3.0.0), libfmt9, libspdlog1.10-fmt9, zlib1g, libisal2, libopenblas0-openmp")
set(CPACK_STRIP_FILES ON)  # the build is RelWithDebInfo: ship the code, not 200 MB of DWARF
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_COMPONENTS_ALL Fedcore_Server Fedcore_Client Fedcore_Development)
if(FEDCORE_PYTHON)
  list(APPEND CPACK_COMPONENTS_ALL Fedcore_Python)
endif()
# One set of maintainer scripts, configured per package with its unit's name.
set(fedcore_deb ${CMAKE_BINARY_DIR}/packaging)
foreach(package fedcore-server fedcore-client)
  set(PACKAGE ${package})
  set(UNIT ${package})
  foreach(script postinst prerm postrm)
    configure_file(${PROJECT_SOURCE_DIR}/packaging/deb/${script}.in
      ${fedcore_deb}/${package}/${script} @ONLY
      FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
        WORLD_READ WORLD_EXECUTE)
  endforeach()
endforeach()

set(CPACK_DEBIAN_FEDCORE_SERVER_PACKAGE_NAME fedcore-server)
set(CPACK_DEBIAN_FEDCORE_SERVER_DESCRIPTION
  "Fedcore aggregation server\n The TLS-secured federated learning server (FedAvg and other strategies, secure\n aggregation, differential privacy), its REST API and dashboard, and the admin tools.")
set(CPACK_DEBIAN_FEDCORE_SERVER_PACKAGE_DEPENDS
  "adduser, openssl, libsqlite3-0 (>= 3.37.0), ${fedcore_runtime_depends}")
if(FEDCORE_MPI)
  string(APPEND CPACK_DEBIAN_FEDCORE_SERVER_PACKAGE_DEPENDS ", libopenmpi3")
endif()
set(CPACK_DEBIAN_FEDCORE_SERVER_PACKAGE_CONTROL_EXTRA
  ${fedcore_deb}/fedcore-server/postinst ${fedcore_deb}/fedcore-server/prerm
  ${fedcore_deb}/fedcore-server/postrm)
set(CPACK_DEBIAN_FEDCORE_SERVER_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

set(CPACK_DEBIAN_FEDCORE_CLIENT_PACKAGE_NAME fedcore-client)
set(CPACK_DEBIAN_FEDCORE_CLIENT_DESCRIPTION
  "Fedcore site daemon\n The hospital-side daemon: trains on local data and sends only model updates to a\n Fedcore server over mutual TLS, under the site's own policy and audit log.")
set(CPACK_DEBIAN_FEDCORE_CLIENT_PACKAGE_DEPENDS "adduser, ${fedcore_runtime_depends}")
set(CPACK_DEBIAN_FEDCORE_CLIENT_PACKAGE_CONTROL_EXTRA
  ${fedcore_deb}/fedcore-client/postinst ${fedcore_deb}/fedcore-client/prerm
  ${fedcore_deb}/fedcore-client/postrm)
set(CPACK_DEBIAN_FEDCORE_CLIENT_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

set(CPACK_DEBIAN_FEDCORE_PYTHON_PACKAGE_NAME python3-fedcore)
set(CPACK_DEBIAN_FEDCORE_PYTHON_DESCRIPTION
  "Fedcore Python SDK\n Bring a PyTorch or NumPy model to a Fedcore federation: fedcore.run_client,\n fedcore.Admin and the state_dict helpers.")
set(CPACK_DEBIAN_FEDCORE_PYTHON_PACKAGE_DEPENDS "python3 (>= 3.11), python3 (<< 3.12), python3-numpy, ${fedcore_runtime_depends}")

set(CPACK_DEBIAN_FEDCORE_DEVELOPMENT_PACKAGE_NAME fedcore-dev)
set(CPACK_DEBIAN_FEDCORE_DEVELOPMENT_DESCRIPTION
  "Fedcore client libraries (development)\n Static libraries, headers and the CMake package for find_package(Fedcore).")
set(CPACK_DEBIAN_FEDCORE_DEVELOPMENT_PACKAGE_DEPENDS
  "libboost1.81-dev, libssl-dev, nlohmann-json3-dev, libeigen3-dev, libspdlog-dev, zlib1g-dev, libisal-dev")

include(CPack)
