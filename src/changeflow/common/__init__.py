"""Helpers under every part of the toolkit (the bottom of the package map): they import nothing of
changeflow. ``errors``: the exit statuses and the errors a person is shown; ``params``: ``KEY=VALUE``
template parameters; ``serving``: a WSGI app on a background thread, and waiting for Ctrl-C;
``project``: where the project (its template.yaml) is."""
