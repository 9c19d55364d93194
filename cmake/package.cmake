# package.cmake -- what `cmake --install` puts where, and the Debian package
# CPack builds from it (`cpack -G DEB` in the build directory:
# lockstep_VERSION_ARCH.deb; scripts/package_check.sh checks it).
#
# `cmake --install` installs the binary, the man page and the README under the
# prefix. The systemd unit and the example configuration go to /lib/systemd
# and /etc, so they are the "service" component, left out of a plain install
# and put in the package (or `cmake --install . --component service`).
include(GNUInstallDirs)

install(TARGETS lockstep RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT lockstep)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT lockstep)

# The man page compressed, as Debian policy wants (-n: no name or time stamp,
# so the bytes depend on the text alone).
set(LOCKSTEP_MAN_GZ ${CMAKE_BINARY_DIR}/lockstep.1.gz)
add_custom_command(OUTPUT ${LOCKSTEP_MAN_GZ}
  COMMAND gzip -9 -n -c ${CMAKE_SOURCE_DIR}/docs/lockstep.1 > ${LOCKSTEP_MAN_GZ}
  DEPENDS ${CMAKE_SOURCE_DIR}/docs/lockstep.1 VERBATIM)
add_custom_target(lockstep_man ALL DEPENDS ${LOCKSTEP_MAN_GZ})
install(FILES ${LOCKSTEP_MAN_GZ} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT lockstep)

install(FILES ${CMAKE_SOURCE_DIR}/packaging/lockstep.service DESTINATION /lib/systemd/system
        COMPONENT service EXCLUDE_FROM_ALL)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/lockstep.conf DESTINATION /etc/lockstep
        COMPONENT service EXCLUDE_FROM_ALL)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME lockstep)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "lockstep maintainers <lockstep@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "tensor-parallel llama-family model server with an OpenAI-compatible HTTP API")
set(CPACK_PACKAGE_DESCRIPTION
    "lockstep serves llama-family language models (GGUF, llama2.c) tensor-parallel
across threads, processes and machines (Open MPI), with continuous batching,
an OpenAI-compatible HTTP API and runner supervision that resumes every
unfinished request when a runner dies.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Debug information stays in the build tree; the package ships a stripped binary.
set(CPACK_STRIP_FILES ON)
# One package holding both components (the service one is excluded from a
# plain install, so it must be asked for by name).
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL lockstep service)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_DEBIAN_PACKAGE_NAME lockstep)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The libraries it links, as dpkg-shlibdeps finds them (libmicrohttpd12,
# libcjson1, libpcre2-8-0, libopenmpi3, libc6), plus mpirun for the mpi
# launcher and adduser for the postinst.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(MPI_C_FOUND)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "openmpi-bin, adduser")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
endif()
# A cross build's package is for its target (scripts/arm64.sh), not for the
# machine it was built on.
if(CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
endif()
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/packaging/postinst ${CMAKE_SOURCE_DIR}/packaging/postrm
    ${CMAKE_SOURCE_DIR}/packaging/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
