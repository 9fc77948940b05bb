# `cmake --install BUILD --prefix P [--strip]` makes a prefix that runs after being copied to another path or machine:
#   bin/           the programs, with an RPATH of $ORIGIN/../lib
#   lib/           libwsync.so (the C API, RPATH $ORIGIN) and every shared library it and the programs need that the
#                  target system does not provide (real files under their SONAMEs), and the static libraries of the
#                  bus and the roles, for embedding
#   include/       the public headers (wsync/wsync.h: the C API), and the generated wsync/schemas/control_generated.h
#   share/wsync/   README.md
# A program is added with one line, wsync_install_executables(TARGET...), a shared library with
# wsync_install_shared_libraries(TARGET...), here or in the folder that defines it; the rules are made at the end of
# the top-level directory, once every target exists.
#
# `cmake --install BUILD --component python --prefix P` (only then: it is not part of the full install) is what the
# Python package ships: under P/${WSYNC_PYTHON_NATIVE_DIR}, lib/libwsync.so with what it needs bundled beside it
# except libstdc++ and libgcc_s, and bin/wsync-coordinator (RPATH $ORIGIN/../lib). A Python process's torch (or any
# other extension) may need a newer libstdc++ than ours, and only one can serve a process: the system's, which is
# at least as new as the one the system's own Python packages were built with.

set(WSYNC_INSTALL_BINDIR bin)
set(WSYNC_INSTALL_LIBDIR lib)
set(WSYNC_INSTALL_INCLUDEDIR include)

# What the target system provides, as regexes on the names programs ask for (DT_NEEDED); everything else is bundled.
# tests/install/relocatable_install.sh checks against the same list.
set(WSYNC_INSTALL_SYSTEM_LIBRARIES
    # glibc: its libraries must match the system's loader, so the target needs glibc >= the build's (2.36 on Debian 12).
    [[^(libc|libm|libmvec|libdl|libpthread|librt|libresolv|libutil|libanl|libnss_[a-z0-9]+|libthread_db)\.so]]
    [[^ld-linux.*\.so]]
    # The GPU driver belongs to the machine's kernel module.
    [[^libcuda\.so]]
    [[^libnvidia-]]
    # NCCL is ~210 MB: it comes from the GPU machine (a system package, or LD_LIBRARY_PATH to a pip wheel's lib/).
    [[^libnccl\.so]])
# libstdc++ and libgcc_s are bundled on purpose: a cluster with an older compiler runtime would fail to start our
# programs with "GLIBCXX_3.4.30 not found". Ours then serves the whole process, which is fine for what shares it:
# NCCL asks for GLIBCXX_3.4.19, the driver for no libstdc++ at all. Not in the python component (above).
set(WSYNC_PYTHON_PROVIDED_LIBRARIES ${WSYNC_INSTALL_SYSTEM_LIBRARIES} [[^libstdc\+\+\.so]] [[^libgcc_s\.so]])

function(wsync_install_executables)
  set_property(GLOBAL APPEND PROPERTY WSYNC_INSTALL_EXECUTABLES ${ARGN})
endfunction()

wsync_install_executables(wsync-coordinator wsync-trainer wsync-worker wsync-demo wsync-bench wsync-mon wsync-ctl
                          wsync-keygen)

function(wsync_install_shared_libraries)
  set_property(GLOBAL APPEND PROPERTY WSYNC_INSTALL_SHARED_LIBRARIES ${ARGN})
endfunction()

# The run-time part, executed by `cmake --install`: copies what GET_RUNTIME_DEPENDENCIES finds into lib/. It reads
# the build tree's programs and shared libraries (their build RPATH points at nothing installed, so a stale prefix
# cannot answer) and the variables wsync_programs, wsync_libraries, wsync_system_libraries, wsync_libdir and
# wsync_strip set before it.
set(_wsync_bundle_code [==[
  set(lib_dir "${CMAKE_INSTALL_PREFIX}/${wsync_libdir}")  # file(INSTALL) adds DESTDIR itself, strip does not
  file(GET_RUNTIME_DEPENDENCIES
       EXECUTABLES ${wsync_programs}
       LIBRARIES ${wsync_libraries}
       PRE_EXCLUDE_REGEXES ${wsync_system_libraries}
       RESOLVED_DEPENDENCIES_VAR resolved
       UNRESOLVED_DEPENDENCIES_VAR unresolved
       CONFLICTING_DEPENDENCIES_PREFIX conflicting)
  if(unresolved)
    message(FATAL_ERROR "wsync install: cannot find ${unresolved}, needed by the programs or libwsync.so; the "
                        "prefix would not run")
  endif()
  foreach(name IN LISTS conflicting_FILENAMES)
    message(FATAL_ERROR "wsync install: ${name} resolves to more than one file: ${conflicting_${name}}")
  endforeach()
  foreach(library IN LISTS resolved)
    # The resolved path ends in the name the loader looks for (the SONAME), usually a symlink to libX.so.5.2.4:
    # lib/ gets the real file under that name.
    get_filename_component(soname "${library}" NAME)
    file(REAL_PATH "${library}" real_file)
    file(INSTALL DESTINATION "${lib_dir}" TYPE FILE FILES "${real_file}" RENAME "${soname}")
    if(CMAKE_INSTALL_DO_STRIP)
      execute_process(COMMAND "${wsync_strip}" --strip-unneeded "$ENV{DESTDIR}${lib_dir}/${soname}"
                      COMMAND_ERROR_IS_FATAL ANY)
    endif()
  endforeach()
]==])

function(_wsync_make_install_rules)
  get_property(programs GLOBAL PROPERTY WSYNC_INSTALL_EXECUTABLES)
  list(REMOVE_DUPLICATES programs)
  set(program_files "")
  foreach(program IN LISTS programs)
    # DT_RPATH (--disable-new-dtags), not the default DT_RUNPATH: the loader applies a program's DT_RUNPATH only to
    # the program's own DT_NEEDED, so libzmq.so.5 found in lib/ would look for libsodium.so.23, libpgm, libnorm and
    # the Kerberos libraries on the system, which GPU machines lack. A program's DT_RPATH is searched for every
    # library of the tree (Debian's have no RUNPATH of their own that would stop it). The alternative, patchelf
    # writing RUNPATH=$ORIGIN into each bundled library, rewrites third-party ELF files and needs one more tool.
    # The cost: DT_RPATH is searched before LD_LIBRARY_PATH, so a bundled library is replaced in lib/, not through
    # LD_LIBRARY_PATH (NCCL and the driver are not bundled, so LD_LIBRARY_PATH still finds those).
    set_target_properties(${program} PROPERTIES INSTALL_RPATH "$ORIGIN/../${WSYNC_INSTALL_LIBDIR}")
    target_link_options(${program} PRIVATE LINKER:--disable-new-dtags)
    list(APPEND program_files "$<TARGET_FILE:${program}>")
  endforeach()
  install(TARGETS ${programs} RUNTIME DESTINATION ${WSYNC_INSTALL_BINDIR})
  # Shared libraries carry their own RPATH ($ORIGIN: what they need lies beside them) and link options.
  get_property(shared_libraries GLOBAL PROPERTY WSYNC_INSTALL_SHARED_LIBRARIES)
  set(shared_library_files "")
  foreach(library IN LISTS shared_libraries)
    list(APPEND shared_library_files "$<TARGET_FILE:${library}>")
  endforeach()
  install(TARGETS ${shared_libraries} LIBRARY DESTINATION ${WSYNC_INSTALL_LIBDIR})
  install(CODE "set(wsync_programs [[${program_files}]])
                set(wsync_libraries [[${shared_library_files}]])
                set(wsync_system_libraries [[${WSYNC_INSTALL_SYSTEM_LIBRARIES}]])
                set(wsync_libdir [[${WSYNC_INSTALL_LIBDIR}]])
                set(wsync_strip [[${CMAKE_STRIP}]])
                ${_wsync_bundle_code}")

  # The python component: libwsync.so under the name the package loads (one real file, no symlink: a wheel holds
  # none), the coordinator it can start, and what both need except what the Python process provides.
  if(TARGET wsync_c)
    set(native_dir "${WSYNC_PYTHON_NATIVE_DIR}")
    install(TARGETS wsync-coordinator RUNTIME DESTINATION ${native_dir}/bin COMPONENT python EXCLUDE_FROM_ALL)
    install(FILES "$<TARGET_FILE:wsync_c>" DESTINATION ${native_dir}/lib RENAME libwsync.so
            COMPONENT python EXCLUDE_FROM_ALL)
    install(CODE "set(wsync_programs [[$<TARGET_FILE:wsync-coordinator>]])
                  set(wsync_libraries [[$<TARGET_FILE:wsync_c>]])
                  set(wsync_system_libraries [[${WSYNC_PYTHON_PROVIDED_LIBRARIES}]])
                  set(wsync_libdir [[${native_dir}/lib]])
                  set(wsync_strip [[${CMAKE_STRIP}]])
                  ${_wsync_bundle_code}
                  if(CMAKE_INSTALL_DO_STRIP)  # install(FILES) does not strip
                    execute_process(COMMAND \"\${wsync_strip}\" --strip-unneeded
                                            \"\$ENV{DESTDIR}\${lib_dir}/libwsync.so\" COMMAND_ERROR_IS_FATAL ANY)
                  endif()"
            COMPONENT python EXCLUDE_FROM_ALL)
  endif()

  # For embedding: the static libraries and their public headers. No find_package(wsync) package: the targets'
  # include directories are build-tree paths and they link pkg-config imported targets, neither of which exports.
  set(libraries wsync_bus wsync_coordinator wsync_trainer_agent wsync_worker_agent)
  if(TARGET wsync_bus_gpu)  # the GPU channels, in builds that have CUDA; their headers are in bus/include
    list(APPEND libraries wsync_bus_gpu)
  endif()
  install(TARGETS ${libraries} ARCHIVE DESTINATION ${WSYNC_INSTALL_LIBDIR} LIBRARY DESTINATION ${WSYNC_INSTALL_LIBDIR})
  foreach(part IN ITEMS bus coordinator trainer_agent worker_agent)
    install(DIRECTORY "${PROJECT_SOURCE_DIR}/${part}/include/" DESTINATION ${WSYNC_INSTALL_INCLUDEDIR})
  endforeach()
  # --strip leaves archives alone; their debug information is most of the prefix (~48 of 56 MB, RelWithDebInfo).
  set(archives "")
  foreach(library IN LISTS libraries)
    list(APPEND archives
         "\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${WSYNC_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:${library}>")
  endforeach()
  install(CODE "if(CMAKE_INSTALL_DO_STRIP)
                  execute_process(COMMAND [[${CMAKE_STRIP}]] --strip-debug ${archives} COMMAND_ERROR_IS_FATAL ANY)
                endif()")
  get_target_property(schema_include_dir wsync_schemas INTERFACE_INCLUDE_DIRECTORIES)
  install(FILES "${schema_include_dir}/wsync/schemas/control_generated.h"
          DESTINATION ${WSYNC_INSTALL_INCLUDEDIR}/wsync/schemas)
  install(FILES "${PROJECT_SOURCE_DIR}/README.md" DESTINATION share/wsync)
endfunction()

if(WSYNC_INSTALL)
  cmake_language(DEFER DIRECTORY "${PROJECT_SOURCE_DIR}" CALL _wsync_make_install_rules)
endif()
