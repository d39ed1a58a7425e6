; Inno Setup script for the Windows bundle (not built or checked on the Linux CI machines).
; 1. On Windows: py -3.11 packaging\bootstrap.py setup --test   (CUDA build when nvcc and a GPU are found)
; 2. .venv\Scripts\python packaging\build_bundle.py             -> dist\clover-launcher\
; 3. Make resources\icons\clover.ico from the PNGs (e.g. ImageMagick: magick clover-16.png ... clover.ico)
; 4. iscc /DAppVersion=<version> packaging\windows\clover-launcher.iss -> dist\clover-launcher-setup.exe
;    the version has one source, app/__init__.py: .venv\Scripts\python -c "import app; print(app.__version__)"
#ifndef AppVersion
  #error Pass the version: iscc /DAppVersion=<app.__version__> clover-launcher.iss
#endif
[Setup]
AppId={{8C7B5E21-3C1E-4F7A-9B51-C10E20260001}
AppName=Clover Launcher
AppVersion={#AppVersion}
AppPublisher=Clover Launcher
DefaultDirName={localappdata}\Programs\Clover Launcher
PrivilegesRequired=lowest
OutputDir=..\..\dist
OutputBaseFilename=clover-launcher-setup
SetupIconFile=..\..\resources\icons\clover.ico
Compression=lzma2
SolidCompression=yes
ArchitecturesInstallIn64BitMode=x64compatible

[Files]
Source: "..\..\dist\clover-launcher\*"; DestDir: "{app}"; Flags: recursesubdirs ignoreversion

[Icons]
Name: "{userprograms}\Clover Launcher"; Filename: "{app}\clover-launcher.exe"
Name: "{userdesktop}\Clover Launcher"; Filename: "{app}\clover-launcher.exe"; Tasks: desktopicon

[Tasks]
Name: desktopicon; Description: "Create a desktop shortcut"; Flags: unchecked

[Run]
Filename: "{app}\clover-launcher.exe"; Parameters: "--self-test"; Flags: runhidden waituntilterminated; StatusMsg: "Checking the installation..."
