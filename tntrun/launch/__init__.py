"""Launch side: how the ranks are started. One module per launcher, chosen by ``launcher=``;
the seam itself (:class:`~tntrun.launch.launcher.Launcher`, the registry) is
:mod:`tntrun.launch.launcher`.

Nothing is imported here: ``python -m tntrun.launch.horovodrun_command`` and the children
horovodrun spawns import this package, and each would pay for the planning stack.
"""
